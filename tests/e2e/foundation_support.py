"""Helpers for the foundation end-to-end tests: the real `tt` console script in a subprocess.

Stdlib only (these tests run in the host venv, which has no torch). Engine
environments are shared through TT_ENVS_DIR (default: the user cache), so the
foundation environment is built once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from process_tree import frozen
from tt_engine_foundation.testing import write_corpus  # the engine's tests train on the same corpus

REPO = Path(__file__).resolve().parents[2]
TT_BIN = shutil.which("tt", path=str(Path(sys.executable).parent)) or "tt"


def tt_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TT_HOME"] = str(tmp_path / "tt-home")
    if not env.get("TT_ENVS_DIR"):
        cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        env["TT_ENVS_DIR"] = str(Path(cache) / "tt" / "envs")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the engine env caches bytecode: stages start faster
    env["TT_NUM_THREADS"] = env.get("TT_NUM_THREADS", "1")  # tiny models: one thread is fastest on a shared CPU
    return env


def tt(tmp_path: Path, *args: Any, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([TT_BIN, *map(str, args)], env=tt_env(tmp_path), cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout)


def tt_popen(tmp_path: Path, *args: Any, hold_at: Optional[int] = None) -> subprocess.Popen:
    """`tt` in the background; with `hold_at`, training waits at that step until it is stopped or killed
    (TT_HOLD_AT_STEP, tt_stagekit): a test that signals there cannot lose the race against the run's end."""
    env = tt_env(tmp_path)
    if hold_at is not None:
        env["TT_HOLD_AT_STEP"] = str(hold_at)
    return subprocess.Popen([TT_BIN, *map(str, args)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def tiny_spec(folder: Path, **foundation: Any) -> Path:
    """A CPU-sized foundation spec with its own corpus and validation text in folder."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "corpus.jsonl").exists():
        write_corpus(folder / "corpus.jsonl", 1, 600)
    if not (folder / "validation.jsonl").exists():
        write_corpus(folder / "validation.jsonl", 2, 60)
    block = dict(
        corpus_path="corpus.jsonl", validation_path="validation.jsonl", depth=2, vocab_size=320,
        tokenizer_max_chars=100_000, max_chars=1_000_000, pretrain_steps=80, sequence_length=64, batch_size=8,
        gradient_accumulation_steps=1, warmup_steps=5, checkpoint_interval_steps=20, checkpoint_interval_seconds=0,
        keep_checkpoints=3, log_interval_steps=1, seed=5, finetune_steps=3, rl_steps=0, device="cpu",
    )
    block.update(foundation)
    spec = {
        "name": "tiny-foundation", "system_prompt": "Add the numbers.", "guidelines": ["Sum only."],
        "examples": [{"input": f"What is {i} plus {i + 3}?", "output": str(2 * i + 3)} for i in range(10)],
        "engine": "foundation", "foundation": block,
    }
    path = folder / "tunedtensor.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


# The runs that tests stop and resume (tests/e2e/test_foundation_recovery.py, test_foundation_operations.py)
# and the uninterrupted reference they are compared with byte for byte (reference_run). Periodic checkpoints
# come every 30 steps: the SIGKILL test needs one; the SIGTERM tests stop earlier, so every checkpoint they
# see was written in answer to a signal.
STOP_SETTINGS = dict(pretrain_steps=50, checkpoint_interval_steps=30, keep_checkpoints=5, finetune_steps=0)


def heartbeat_step(run_dir: Path) -> int:
    path = run_dir / "pretrain" / "recovery" / "training-metrics.jsonl"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return 0
    steps = []
    for line in lines:
        try:
            steps.append(json.loads(line)["step"])
        except (json.JSONDecodeError, KeyError):
            pass
    return max(steps, default=0)


def wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 300,
                  checkpoint: Optional[str] = None) -> int:
    """Wait for a heartbeat at `step` or later (and for a finished checkpoint folder, when named)."""
    deadline = time.monotonic() + timeout
    folder = run_dir / "pretrain" / "recovery" / "checkpoints"
    while time.monotonic() < deadline:
        current = heartbeat_step(run_dir)
        if current >= step and (checkpoint is None or (folder / checkpoint).is_dir()):
            return current
        if proc.poll() is not None:
            raise AssertionError(f"tt exited {proc.returncode} before step {step}:\n{proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.02)
    raise AssertionError(f"pretraining did not reach step {step} in {timeout}s")


@contextlib.contextmanager
def frozen_at_step(proc: subprocess.Popen, run_dir: Path, step: int, total: int, timeout: float = 300,
                   checkpoint: Optional[str] = None) -> Iterator[tuple[int, list[int]]]:
    """Once the heartbeat reaches `step` (and the named checkpoint folder exists), hold `tt` and every process
    under it stopped for the block (process_tree.frozen): yields the step the run is held at, checked to be
    short of its `total` steps, and the pids (tt first). Signals sent inside reach every process together
    when the block ends. Start the run with `tt_popen(..., hold_at=step)`: it then waits at `step` for the
    signal, so however late the test looks it finds the run there."""
    wait_for_step(run_dir, step, proc, timeout, checkpoint)
    with frozen(proc.pid) as pids:
        at = heartbeat_step(run_dir)
        assert proc.poll() is None and at < total, f"the run reached step {at} of {total} before it could be held"
        yield at, pids


def reference_run(factory: Any, **settings: Any) -> Path:
    """The uninterrupted one-process run of `tiny_spec(**settings)`, trained once per test session: every
    module comparing a stopped-and-resumed run with the same settings gets this run folder."""
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    base = factory.getbasetemp() / f"reference-{key}"
    run_dir = base / "run"
    if not (run_dir / "report.json").is_file():
        shutil.rmtree(base, ignore_errors=True)  # a failed earlier attempt in this session
        proc = tt(base, "run", tiny_spec(base / "spec", **settings), "--resume", run_dir)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != ".tt-run.lock":
            out[str(path.relative_to(root))] = (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def checkpoints(run_dir: Path) -> list[str]:
    folder = run_dir / "pretrain" / "recovery" / "checkpoints"
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("step-") and "." not in p.name)
