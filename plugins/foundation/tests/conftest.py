"""Helpers for the foundation engine tests: tiny configs, hand-written stage requests, real subprocesses.

These tests run inside the engine environment (torch, tokenizers); they never import tt_host.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from tt_engine_foundation.testing import write_corpus

STAGES = ["tokenizer", "token_cache", "pretrain", "bpb", "sft", "rl", "chat_eval"]
MODULES = {"general_baseline": "chat_eval"}  # a stage whose module is another stage's (plugin.py STAGES)
SYSTEM = "Answer with the sum only."


def tiny_config(**overrides: Any) -> dict[str, Any]:
    cfg = dict(
        corpus_path=None, validation_path=None, checkpoint_backup_dir=None, depth=1, vocab_size=320,
        tokenizer_max_chars=200_000, max_chars=1_000_000, pretrain_steps=24, sequence_length=40, batch_size=4,
        gradient_accumulation_steps=2, learning_rate=None, weight_decay=0.1, warmup_steps=3, min_lr_ratio=0.1,
        gradient_clip=1.0, bf16=True, checkpoint_interval_steps=6, checkpoint_interval_seconds=0,
        keep_checkpoints=3, log_interval_steps=1, seed=11, finetune_steps=4, rl_steps=0, nproc_per_node=1,
        device="cpu", compile=False, bpb_max_chars=4_000_000, init_model=None,
    )
    cfg.update(overrides)
    return cfg


def train_rows(n: int = 12) -> list[dict[str, Any]]:
    return [
        {"id": f"r{i}", "messages": [{"role": "system", "content": SYSTEM},
                                     {"role": "user", "content": f"What is {i} plus {i + 2}?"},
                                     {"role": "assistant", "content": str(2 * i + 2)}]}
        for i in range(n)
    ]


def eval_prompts(n: int = 3) -> list[dict[str, Any]]:
    return [{"id": f"e{i}", "messages": [{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": f"What is {i} plus 5?"}]} for i in range(n)]


def make_request(run_dir: Path, stage: str, cfg: dict[str, Any], resume: bool = False) -> Path:
    stages = {}
    for name in STAGES:
        result = run_dir / name / "result.json"
        if result.is_file() and name != stage:
            stages[name] = {"dir": str(run_dir / name), "result": json.loads(result.read_text())}
    stage_dir = run_dir / stage
    stage_dir.mkdir(parents=True, exist_ok=True)
    request = {
        "protocol": 1, "engine": "foundation", "stage": stage, "run_dir": str(run_dir), "stage_dir": str(stage_dir),
        "result_path": str(stage_dir / "result.json"),
        "spec": {"name": "t", "engine": "foundation", "foundation": cfg}, "spec_dir": str(run_dir.parent),
        "system_message": SYSTEM, "system_message_sha256": hashlib.sha256(SYSTEM.encode()).hexdigest(),
        "train_rows": train_rows(), "eval_prompts": eval_prompts() if stage in ("chat_eval", "general_baseline") else [],
        "device": "cpu", "resume": resume, "fingerprint": "test", "stages": stages,
    }
    path = stage_dir / "request.json"
    path.write_text(json.dumps(request))
    return path


class StageRun:
    def __init__(self, code: int, events: list[dict], lines: list[str]):
        self.code, self.events, self.lines = code, events, lines

    def logs(self, level: Optional[str] = None) -> list[str]:
        return [e["message"] for e in self.events if e.get("type") == "log" and (level is None or e["level"] == level)]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def run_stage(run_dir: Path, stage: str, cfg: dict[str, Any], resume: bool = False,
              signal_at_step: Optional[int] = None, sig: int = signal.SIGTERM,
              signal_after: Optional[Path] = None, env_extra: Optional[dict[str, str]] = None,
              on_signalled: Optional[Any] = None) -> StageRun:
    """Run a stage module in a subprocess; optionally send `sig` once it reports `signal_at_step` (and, when
    given, once `signal_after` exists: checkpoints are finished in a background thread), to every process of the
    stage (the torchrun agent and each rank), then call `on_signalled(pid)`. The stage waits at that step until it is signalled (TT_HOLD_AT_STEP), so
    a short run can never end before the signal."""
    from tt_stagekit.launcher import stage_arguments

    request = make_request(run_dir, stage, cfg, resume)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TT_NUM_THREADS="1", **(env_extra or {}))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # let the engine env cache bytecode: torch imports 2x faster
    env.pop("TT_HOLD_AT_STEP", None)
    if signal_at_step is not None:
        env["TT_HOLD_AT_STEP"] = str(signal_at_step)
    # nproc_per_node > 1: under the torchrun launcher, as tt starts it; signals then go to every process at
    # once (the agent and each rank, which run in sessions of their own), as a cgroup-wide stop sends them.
    group = int(cfg.get("nproc_per_node") or 1) > 1
    module = MODULES.get(stage, stage)
    args = stage_arguments({"nproc_per_node": cfg.get("nproc_per_node") or 1}, f"tt_engine_foundation.stages.{module}")
    proc = subprocess.Popen([sys.executable, *args, str(request)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=run_dir, start_new_session=group)
    events, lines, sent = [], [], False
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(event, dict):
                continue
            events.append(event)
            if (signal_at_step is not None and not sent and event.get("type") == "progress"
                    and event.get("step", 0) >= signal_at_step):
                if signal_after is not None:
                    _wait_for_path(signal_after, proc)
                if group:
                    signalled = signal_tree(proc.pid, sig)
                    assert len(signalled) >= 3, f"signalled {signalled}: the agent and both ranks expected"
                else:
                    proc.send_signal(sig)
                if on_signalled is not None:
                    on_signalled(proc.pid)
                sent = True
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
        raise
    return StageRun(proc.wait(), events, lines)


def signal_tree(root: int, sig: int) -> list[int]:
    """Send `sig` to `root` and every descendant (found through /proc), as close together as one loop can:
    what systemd or Slurm does to a cgroup. The pids signalled."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    for pid in tree:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return tree


def _wait_for_path(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait (the stage held at its step) for `path`; a generous bound for a loaded machine, never the point."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the stage exited ({proc.returncode}) before {path.name} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout}s"
        time.sleep(0.02)


def _wait(condition, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def wait_signal_taken(pid: int, sig: int) -> None:
    """Wait until `pid` has taken `sig` (it is no longer pending in /proc/PID/status)."""
    def taken() -> bool:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            return True
        masks = [int(line.split()[1], 16) for line in lines if line.startswith(("SigPnd:", "ShdPnd:"))]
        return not any(mask >> (int(sig) - 1) & 1 for mask in masks)

    _wait(taken, f"pid {pid} to take signal {sig}")


def wait_until_gone(path: Path) -> None:
    _wait(lambda: not path.exists(), f"{path} to go")


def prepare(run_dir: Path, cfg: dict[str, Any]) -> None:
    for stage in ("tokenizer", "token_cache"):
        out = run_stage(run_dir, stage, cfg)
        assert out.code == 0, out.text


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus.jsonl")
