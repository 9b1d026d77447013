"""examples/adapter-on-foundation end to end, through the `tt` command only (smallest configuration, CPU).

`tt run` (foundation) → `tt models export` (Hugging Face folder) → `tt run`
(adapter whose base_model is that folder) → `tt models export --merged` →
`tt serve` (the foundation run, exported and cached on the way, and the
adapter by its registered id): `/health`, `/v1/models`, a chat completion,
Ctrl-C. Plus the refusals: an existing OUT, a non-loopback bind without a key.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, TT, TT_BIN, base_env
from example_copy_support import tracked_copy

EXAMPLE = REPO / "examples" / "adapter-on-foundation"


def shrink(path: Path, section: str, **values) -> None:
    spec = json.loads(path.read_text())
    spec[section].update(values)
    path.write_text(json.dumps(spec, indent=2))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("aof")
    work = root / "example"
    tracked_copy(EXAMPLE, work)
    shrink(work / "foundation" / "tunedtensor.json", "foundation", pretrain_steps=16, finetune_steps=6, batch_size=8,
           checkpoint_interval_steps=8, tokenizer_max_chars=40000, max_chars=40000, log_interval_steps=4)
    shrink(work / "adapter" / "tunedtensor.json", "hyperparameters", n_epochs=1, max_steps=3, max_eval_examples=3,
           checkpoint_interval_steps=2)
    tt = TT({**base_env(root, []), "TT_NUM_THREADS": "1"}, work)  # tiny models: one thread is fastest on a shared CPU
    steps: dict = {"tt": tt, "work": work}

    code, out = tt.json("run", "foundation/tunedtensor.json", "--resume", "runs/foundation")
    assert code == 0 and out["status"] == "completed", out
    steps["foundation"] = out

    code, out = tt.json("models", "export", "runs/foundation", "--format", "hf", "base-model")
    assert code == 0 and out["kind"] == "foundation-hf", out
    steps["export"] = out

    code, out = tt.json("run", "adapter/tunedtensor.json", "--resume", "runs/adapter")
    assert code == 0 and out["status"] == "completed", out
    steps["adapter"] = out
    return steps


def test_foundation_run_export_and_adapter_run(pipeline):
    tt, work = pipeline["tt"], pipeline["work"]
    exported = work / "base-model"
    assert set(pipeline["export"]["files"]) >= {"config.json", "model.safetensors", "tokenizer.json",
                                                "tokenizer_config.json", "special_tokens_map.json",
                                                "generation_config.json", "artifact-manifest.json"}
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is False
    assert pipeline["export"]["model"].endswith("foundation-sft")

    report = pipeline["adapter"]["report"]
    assert report["engine"] == "adapter" and report["status"] == "completed"
    for key in ("baseline.exact_match", "candidate.exact_match", "train.final_loss", "eval.count"):
        assert key in report["metrics"], key
    adapter_manifest = json.loads((work / "runs/adapter/train/adapter/artifact-manifest.json").read_text())
    assert adapter_manifest["base_model"]["name"] == str(exported)

    # OUT exists: refused with exit 2, nothing touched
    before = sorted(p.name for p in exported.iterdir())
    code, out = tt.json("models", "export", "runs/foundation", "--format", "hf", "base-model")
    assert code == 2 and "already exists" in out["error"]["message"]
    assert sorted(p.name for p in exported.iterdir()) == before
    code, out = tt.json("models", "export", "runs/foundation", "--format", "onnx", "other")
    assert code == 2 and "exports as hf, gguf, ollama" in out["error"]["message"] and not (work / "other").exists()
    code, out = tt.json("models", "export", "runs/foundation", "--format", "gguf", "--quant", "q5_k", "other")
    assert code == 2 and "--quant 'q5_k'" in out["error"]["message"] and not (work / "other").exists()

    # the engines' declared formats (ModelKind.formats): Ollama for the foundation model, GGUF for the adapter
    code, out = tt.json("models", "export", "runs/foundation", "--format", "ollama", "--quant", "q8_0", "ollama")
    assert code == 0 and out["kind"] == "foundation-ollama" and out["quant"] == "q8_0", out
    assert {"model.gguf", "Modelfile", "tt-export.json", "artifact-manifest.json"} <= set(out["files"])
    assert out["ollama_create"].endswith(f"-f {work / 'ollama' / 'Modelfile'}")

    # the adapter merged into full-precision weights, by registered id
    code, listing = tt.json("models", "list")
    adapter_id = next(m["id"] for m in listing["models"] if m["kind"] == "adapter")
    code, out = tt.json("models", "export", adapter_id, "--merged", "merged")
    assert code == 0 and out["kind"] == "merged", out
    assert (work / "merged" / "model.safetensors").is_file() and not (work / "merged" / "adapter_config.json").exists()
    code, out = tt.json("models", "verify", adapter_id)
    assert code == 0 and out["ok"]
    code, out = tt.json("models", "export", adapter_id, "--format", "gguf", "merged-gguf")
    assert code == 0 and out["kind"] == "merged-gguf" and out["quant"] == "f16" and "model.gguf" in out["files"], out


def _start(tt: TT, *args: str) -> tuple[subprocess.Popen, dict]:
    process = tt.popen("serve", *args, "--port", "0", "--json")
    deadline = time.monotonic() + 300
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("type") == "ready":
            return process, event
    process.kill()
    raise AssertionError(f"tt serve did not become ready (exit {process.wait()}): {process.stderr.read()}")


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _chat(url: str, model: str, content: str = "the film was great", max_tokens: int = 4) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": content}],
                       "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("which", ["foundation-run", "adapter-id"])
def test_tt_serve_answers_and_stops_on_ctrl_c(pipeline, which):
    tt, work = pipeline["tt"], pipeline["work"]
    if which == "foundation-run":
        target = "runs/foundation"
    else:
        _, listing = tt.json("models", "list")
        target = next(m["id"] for m in listing["models"] if m["kind"] == "adapter")
    process, ready = _start(tt, target)
    try:
        assert _get(f"{ready['url']}/health") == {"status": "ok"}
        name = _get(f"{ready['url']}/v1/models")["data"][0]["id"]
        assert name == ready["model"]
        if which == "adapter-id":
            assert name == target
        else:
            assert name.endswith("foundation-sft") and (work / "runs/foundation/export/hf/config.json").is_file()
        answer = _chat(ready["url"], name)
        assert answer["choices"][0]["message"]["role"] == "assistant" and answer["usage"]["prompt_tokens"] > 0
        if which == "foundation-run":  # instruction first on the foundation model's short context too
            context = json.loads((work / "runs/foundation/export/hf/config.json").read_text())["max_position_embeddings"]
            long = _chat(ready["url"], name, "the film was great " * 200, max_tokens=4)
            assert long["usage"]["prompt_tokens"] <= context - 4  # user text trimmed, the system message kept
            with pytest.raises(urllib.error.HTTPError) as refused:
                _chat(ready["url"], name, max_tokens=context)
            assert refused.value.code == 400
            assert json.loads(refused.value.read())["error"]["code"] == "context_length_exceeded"
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    assert code == 130
    with pytest.raises(urllib.error.URLError):
        _get(f"{ready['url']}/health")


def test_tt_serve_refuses_public_bind_without_key(pipeline):
    tt = pipeline["tt"]
    env = {k: v for k, v in tt.env.items() if k != "TT_API_KEY"}
    started = time.monotonic()
    proc = subprocess.run([TT_BIN, "serve", "runs/foundation", "--host", "0.0.0.0"], env=env, cwd=tt.cwd,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "API key" in proc.stderr
    assert time.monotonic() - started < 30
