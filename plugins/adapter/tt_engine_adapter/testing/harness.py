"""A minimal stand-in for the host, for engine tests and benches inside the engine env.

It writes stage requests exactly as docs/protocol.md describes and runs each
stage as `python -m <module> request.json` in a subprocess, so the engine's
stages are exercised through their real entry points. It is not the host: no
validation, scoring or registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from tt_stagekit.chatrows import compile_system_message, normalize_prompt

MODULES = {
    "prepare": "tt_engine_adapter.stages.prepare",
    "prefetch": "tt_engine_adapter.stages.prefetch",
    "baseline": "tt_engine_adapter.stages.evaluate",
    "train": "tt_engine_adapter.stages.train",
    "sft": "tt_engine_adapter.stages.evaluate",
    "reference": "tt_engine_adapter.stages.reference",
    "preference": "tt_engine_adapter.stages.preference",
    "candidate": "tt_engine_adapter.stages.evaluate",
    "reinforce": "tt_engine_adapter.stages.reinforce",
}
DEFAULT_HP = {
    "n_epochs": 3, "max_steps": None, "learning_rate": 2e-4, "batch_size": 4, "gradient_accumulation_steps": 1,
    "lora_rank": 16, "lora_alpha": 32.0, "lora_dropout": 0.05, "lora_target_modules": "all-linear",
    "max_seq_length": 1024, "max_eval_examples": None, "max_new_tokens": 128, "eval_batch_size": 16,
    "warmup_ratio": 0.1, "lr_scheduler": "cosine", "weight_decay": 0.0, "max_grad_norm": 1.0,
    "precision": "auto", "checkpoint_interval_steps": 50, "keep_checkpoints": 2, "log_interval_steps": 1,
    "seed": 42,
}


class Run:
    """One run directory driven stage by stage."""

    def __init__(self, run_dir: Path, spec: dict, examples_train: list[dict], examples_eval: list[dict]):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.spec = {"hyperparameters": {**DEFAULT_HP, **spec.get("hyperparameters", {})},
                     **{k: v for k, v in spec.items() if k != "hyperparameters"}}
        self.spec.setdefault("examples", examples_train + examples_eval)
        self.spec.setdefault("device", "auto")
        self.system = compile_system_message(self.spec.get("system_prompt", ""),
                                                    self.spec.get("guidelines", []), self.spec.get("constraints", []))
        self.train_rows = [self._row(f"train-{i}", e, True) for i, e in enumerate(examples_train)]
        self.eval_prompts = [self._row(f"eval-{i}", e, False) for i, e in enumerate(examples_eval)]
        self.references = {f"eval-{i}": e["output"] for i, e in enumerate(examples_eval)}
        self.done: dict[str, Any] = {}

    def _row(self, row_id: str, example: dict, with_answer: bool) -> dict:
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": example["input"]}]
        if with_answer:
            messages.append({"role": "assistant", "content": example["output"]})
        return {"id": row_id, "messages": messages}

    def request(self, stage: str, resume: bool = False, device: str = "cpu") -> Path:
        stage_dir = self.run_dir / stage
        stage_dir.mkdir(parents=True, exist_ok=True)
        fingerprint = hashlib.sha256(json.dumps([stage, self.spec, self.train_rows], sort_keys=True).encode()).hexdigest()
        request = {
            "protocol": 1, "engine": "adapter", "stage": stage, "run_dir": str(self.run_dir),
            "stage_dir": str(stage_dir), "result_path": str(stage_dir / "result.json"), "spec": self.spec,
            "spec_dir": str(self.run_dir), "system_message": self.system,
            "system_message_sha256": hashlib.sha256(self.system.encode()).hexdigest(),
            "train_rows": self.train_rows if stage == "prepare" else [],
            "eval_prompts": self.eval_prompts if stage in ("baseline", "sft", "candidate") else [],
            "device": device, "resume": resume, "fingerprint": fingerprint, "stages": self.done,
        }
        path = stage_dir / "request.json"
        path.write_text(json.dumps(request, indent=1))
        return path

    def start(self, stage: str, resume: bool = False, device: str = "cpu", env: Optional[dict] = None,
              **popen: Any) -> subprocess.Popen:
        env = env or {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen([sys.executable, "-P", "-m", MODULES[stage], str(self.request(stage, resume, device))],
                                cwd=self.run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True, **popen)

    def stopped_at(self, stage: str, step: int, timeout: float = 300) -> tuple[int, str]:
        """Start `stage`, send its process group SIGTERM once it reports optimizer step `step` (TT_HOLD_AT_STEP
        holds it there, so a short run cannot end first); (exit code, stderr)."""
        import signal

        proc = self.start(stage, env={**os.environ, "PYTHONUNBUFFERED": "1", "TT_HOLD_AT_STEP": str(step)})
        for line in proc.stdout:
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("type") == "progress" and event["step"] >= step:
                os.killpg(proc.pid, signal.SIGTERM)
                break
        _, err = proc.communicate(timeout=timeout)
        return proc.returncode, err

    def stage(self, stage: str, resume: bool = False, device: str = "cpu", check: bool = True) -> dict:
        """Run a stage to completion; returns {"code", "result", "events", "stderr"}."""
        proc = self.start(stage, resume, device)
        out, err = proc.communicate()
        return self.finish(stage, proc.returncode, out, err, check)

    def finish(self, stage: str, code: int, out: str, err: str, check: bool = True) -> dict:
        events = []
        for line in out.splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        result_path = self.run_dir / stage / "result.json"
        result = json.loads(result_path.read_text()) if code == 0 and result_path.exists() else None
        if check and code != 0:
            raise AssertionError(f"stage {stage} exited {code}:\n{out[-3000:]}\n{err[-3000:]}")
        if result is not None:
            self.done[stage] = {"dir": str(self.run_dir / stage), "result": result}
        return {"code": code, "result": result, "events": events, "stderr": err}

    def predictions(self, stage: str) -> dict[str, str]:
        rows = [json.loads(l) for l in (self.run_dir / stage / "predictions.jsonl").read_text().splitlines()]
        return {r["id"]: r["prediction"] for r in rows}

    def exact_match(self, stage: str) -> float:
        preds = self.predictions(stage)
        hits = sum(normalize_prompt(preds[k]) == normalize_prompt(v) for k, v in self.references.items())
        return hits / max(1, len(self.references))


def sentiment_run(run_dir: Path, model_dir: str, hyperparameters: Optional[dict] = None,
                  n_train: int = 48, n_eval: int = 16) -> Run:
    from tt_engine_adapter.testing.tiny_model import sentiment_examples

    examples = sentiment_examples(n_train + n_eval, seed=7)
    spec = {"name": "sentiment", "engine": "adapter", "base_model": str(model_dir), "base_model_revision": None,
            "system_prompt": "Classify the sentiment of the review.", "guidelines": ["Answer with one word."],
            "constraints": [], "datasets": None, "hyperparameters": hyperparameters or {}}
    return Run(run_dir, spec, examples[:n_train], examples[n_train:])


def worse_than_sft_warning(out: dict, before: str, after: str) -> str:
    """The one "WORSE than SFT" warning of a tuning stage's run `out` (`RunDir.stage`'s), once its probe metric
    `after` is checked below `before` and the warning checked to quote the `before` value."""
    metrics = out["result"]["metrics"]
    assert metrics[after] < metrics[before], metrics
    warned = [e["message"] for e in out["events"] if e.get("level") == "warning" and "WORSE than SFT" in
              e.get("message", "")]
    assert len(warned) == 1, out["events"][-6:]
    assert f"fell from {metrics[before]} " in warned[0], warned
    return warned[0]
