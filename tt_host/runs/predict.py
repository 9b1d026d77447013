"""A dry run's prediction of the baselines the cross-run cache would give (tt_host.evaluation.baseline_cache).

`tt run --dry-run` and `tt pipeline plan` decide each stage as a run would (tt_host.runs.plan); a baseline stage
that would run is shown as `reuse` when the cache holds an evaluation with the same hint (engine, environment,
stage, base model and revision, prompts, system message, settings, device), naming the run it came from. Reads
only; nothing is copied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from tt_host.evaluation import baseline_cache
from tt_host.runs.plan import Decision
from tt_host.spec.loading import LoadedSpec


def with_cached_baselines(loaded: LoadedSpec, run_dir: Path, decisions: list[Decision],
                          device: Optional[str] = None) -> list[Decision]:
    """`decisions`, a baseline stage that would run marked `reuse` when the cache predicts it."""
    from tt_host.engines.envs import env_key
    from tt_host.runs.fingerprint import chain
    from tt_host.runs.invoke import RunCall, StageCall, stage_request
    from tt_host.runs.progress import QuietReporter
    from tt_host.runs.store import RunDir

    plan = chain(loaded.engine, loaded.spec, loaded.compiled)
    candidates = [i for i, (planned, d) in enumerate(zip(plan, decisions))
                  if d.action == "run" and baseline_cache.applies(planned.stage, False)]
    if not candidates:
        return decisions
    policy = loaded.spec.evaluation.general_regression if getattr(loaded.spec, "evaluation", None) else None
    general = policy.load() if policy else None
    run_call = RunCall(loaded, None, RunDir(run_dir), device, QuietReporter(), "", False)  # type: ignore[arg-type]
    key = env_key(loaded.engine)
    out = list(decisions)
    for index in candidates:
        stage, inputs, fingerprint = plan[index]
        call = StageCall(run_call, None, stage, fingerprint, False, {}, general)  # type: ignore[arg-type]
        request = stage_request(call, run_dir / stage.name, run_dir / stage.name / "result.json").to_json()
        origin = baseline_cache.predict(baseline_cache.hint_key(loaded.engine, key, stage, loaded.spec, inputs,
                                                                request))
        if origin is not None:
            out[index] = Decision(stage.name, "reuse", f"the baseline cache holds this evaluation (from run {origin}): "
                                  "reused, no stage process, when the stages before it give the same outputs")
    return out
