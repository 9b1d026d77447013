"""Helpers for the adapter end-to-end tests: the real `tt` console script in a subprocess.

Stdlib only (the host venv has no torch). The adapter engine's environment is
prepared once with `tt engines prepare adapter --json` (shared through
TT_ENVS_DIR); its python builds the tiny base model and runs the PEFT checks.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from foundation_support import snapshot

TT_BIN = shutil.which("tt", path=str(Path(sys.executable).parent)) or "tt"

POSITIVE = ["great", "wonderful", "superb", "lovely", "brilliant", "delightful", "excellent", "charming"]
NEGATIVE = ["awful", "boring", "dreadful", "terrible", "dull", "clumsy", "bland", "tedious"]
SUBJECTS = ["the film", "the plot", "the acting", "the music", "the ending", "the script", "the cast", "the story"]


def tt_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TT_HOME"] = str(home / "tt-home")
    if not env.get("TT_ENVS_DIR"):
        cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        env["TT_ENVS_DIR"] = str(Path(cache) / "tt" / "envs")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("TT_NUM_THREADS", "2")
    env["HF_HUB_OFFLINE"] = "1"
    env["HF_HUB_CACHE"] = str(home / "hf-hub")  # a Hugging Face cache of the test's own (see hub_cache)
    return env


def tt(home: Path, *args: Any, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([TT_BIN, *map(str, args)], env=tt_env(home), cwd=home, capture_output=True, text=True,
                          timeout=timeout)


def stage_starts(run: Path) -> dict[str, str]:
    """Each stage's `started_at` in run.json (unchanged when a resume ran nothing again)."""
    return {name: s.get("started_at") for name, s in json.loads((run / "run.json").read_text())["stages"].items()}


def run_resumed(home: Path, spec: Path, run: Path) -> dict:
    """`tt run SPEC --resume RUN --json`, which must exit 0; its report."""
    proc = tt(home, "run", spec, "--resume", run, "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)["report"]


def engine_python(home: Path) -> str:
    proc = tt(home, "engines", "prepare", "adapter", "--json", timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["python"]


def engine_run(python: str, home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([python, *args], env=tt_env(home), cwd=home, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def build_tiny_model(python: str, home: Path, outdir: Path, arch: str = "llama") -> Path:
    engine_run(python, home, "-m", "tt_engine_adapter.testing.tiny_model", str(outdir), "--arch", arch)
    return outdir


@contextmanager
def shared_tiny_model(tmp_path_factory) -> Iterator[Path]:
    """The tiny llama base model, built once per test session rather than once per module (~10 s of CPU each,
    docs/testing.md "CPU time"), for a module fixture to yield from: `with shared_tiny_model(f) as model:`.

    One folder beside the session's pytest-xdist workers' own, built under a lock by whichever module asks first
    and renamed into place whole. The build is deterministic (seeded), so every module gets the weights it would
    have built itself, as long as no module changes the folder: its files' digests, recorded at the build, are
    checked when a module takes the folder and again when it is done with it, and a change fails that module
    (naming the files) instead of reaching the modules after it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's popen-gwN
    target, recorded = root / "shared-tiny-llama", root / "shared-tiny-llama.json"
    with open(root / "shared-tiny-llama.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_dir():
            home = root / "shared-tiny-llama-build"
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir()
            built = build_tiny_model(engine_python(home), home, home / "tiny-llama", arch="llama")
            recorded.write_text(json.dumps(snapshot(built)))
            built.rename(target)
    want = json.loads(recorded.read_text())
    _assert_unchanged(target, want, "before this module took it")
    yield target
    _assert_unchanged(target, want, "while this module had it (by it, or by a module on another worker)")


def _assert_unchanged(model: Path, want: dict[str, list], when: str) -> None:
    got = {name: list(entry) for name, entry in snapshot(model).items()}
    changed = sorted(name for name in want.keys() | got.keys() if want.get(name) != got.get(name))
    assert not changed, (f"the session's shared tiny model {model} was changed {when}: {changed}; a module that "
                         "needs a changed base model must change its own copy (shutil.copytree)")


def hub_cache(home: Path, model: Path, repo: str, commit: str, ref: str = "main") -> Path:
    """Put `model` into the test's Hugging Face cache as `repo` at `commit`, with refs/<ref> naming it.

    The cache layout huggingface_hub reads offline: models--org--name/{refs/<ref>, snapshots/<commit>/}.
    """
    folder = home / "hf-hub" / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / commit
    shutil.copytree(model, snapshot)
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / ref).write_text(commit)
    return snapshot


def sentiment_examples() -> list[dict[str, str]]:
    """64 distinct reviews, labels alternating; deterministic."""
    rows = []
    for i in range(64):
        label = "positive" if i % 2 == 0 else "negative"
        adjective = (POSITIVE if label == "positive" else NEGATIVE)[(i // 2) % 8]
        subject = SUBJECTS[(i * 3 + i // 16) % 8]
        rows.append({"input": f"{subject} was {adjective} (review {i})", "output": label})
    return rows


def write_spec(folder: Path, base_model: str, **extra: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "name": "sentiment",
        "engine": "adapter",
        "system_prompt": "Classify the sentiment of the movie review.",
        "guidelines": ["Answer with one word: positive or negative."],
        "base_model": base_model,
        "hyperparameters": {"n_epochs": 6, "learning_rate": 0.005, "batch_size": 8, "lora_rank": 8,
                            "lora_alpha": 16, "lora_dropout": 0.0, "max_seq_length": 128, "max_new_tokens": 6,
                            "seed": 7, "checkpoint_interval_steps": 5},
        "examples": sentiment_examples(),
    }
    for key, value in extra.items():
        if key == "hyperparameters":
            spec["hyperparameters"].update(value)
        else:
            spec[key] = value
    path = folder / "tunedtensor.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


def only_run_dir(spec_dir: Path) -> Path:
    runs = [p for p in (spec_dir / ".tuned-tensor" / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


# Loads base + adapter with plain transformers/PEFT (no tt code) and answers the held-out prompts
# the candidate stage received, the way any user would.
PEFT_CHECK = r"""
import json, sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
from peft import PeftModel
base, adapter, request, max_new = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(base)
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).eval()
stop = [tok.convert_tokens_to_ids(t) for t in ("<|eot_id|>", "<|im_end|>") if t in tok.get_vocab()]
out = {}
for prompt in json.loads(Path(request).read_text())["eval_prompts"]:
    text = tok.apply_chat_template(prompt["messages"], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    ids = tok(text, add_special_tokens=False, return_tensors="pt")
    gen = model.generate(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"], max_new_tokens=max_new,
                         do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=stop)
    out[prompt["id"]] = tok.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()
print(json.dumps(out))
"""

# Max absolute difference between two adapters' tensors (and whether their keys match).
COMPARE = r"""
import json, sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
print(json.dumps({"same_keys": a.keys() == b.keys(), "count": len(a),
                  "max_diff": max(float((a[k] - b[k]).abs().max()) for k in a) if a.keys() == b.keys() else None}))
"""


def _drain(process: subprocess.Popen, keep: int = 200) -> None:
    """Read the server's stdout and stderr from here on, keeping their last `keep` lines (`process.tails`), so a
    long test never fills a pipe: a full pipe would block `tt serve` on its next write (a hang that looks like
    the server's)."""
    process.tails = {}
    for name in ("stdout", "stderr"):
        stream, tail = getattr(process, name), collections.deque(maxlen=keep)
        process.tails[name] = tail
        threading.Thread(target=lambda s=stream, t=tail: [t.append(line) for line in iter(s.readline, "")],
                         daemon=True).start()


def ready_event(process: subprocess.Popen, what: str, timeout: float = 300) -> dict:
    """The `ready` event a `tt serve --json` process prints (its stdout a pipe); kills it and fails naming `what`
    when it ends or does not get ready in `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("type") == "ready":
            _drain(process)
            return event
    process.kill()
    raise AssertionError(f"{what} did not become ready: {process.stderr.read()[-4000:]}")
