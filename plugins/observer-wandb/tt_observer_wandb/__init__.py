"""tt observer plugin: each tt run as a Weights & Biases run, offline unless asked otherwise.

Active for a run when the spec's `observers` block has a `wandb` entry or
`TT_OBSERVERS` lists `wandb`. Settings (spec first, then environment, then default):

- `mode` / `WANDB_MODE`: `offline` by default (nothing leaves the machine;
  `wandb sync <run folder>` uploads later), `online` to stream;
- `project` / `WANDB_PROJECT`: default the spec's name;
- `entity` / `WANDB_ENTITY`: default wandb's own;
- `dir` / `WANDB_DIR`: where the `wandb/` folder goes, default the tt run folder.

Logged: config `spec_name`, `engine`, `system_message_sha256`, `tt_run_id`,
`run_dir` and the engine's spec block; history rows `<stage>/<name>` (with
`<stage>/step`) from `progress`/`metrics` events; summary entries for the
host-scored metrics (`candidate.exact_match`, ...), the gate (`gate/status`,
`gate/score_delta`, `gate/pass_rate_delta`) and every number of the final
report's `metrics`; the run finishes with exit code 0 when tt's run completed, 1 otherwise.

wandb is imported when a run enables this observer, so plugin loading stays quick.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import pluggy

hookimpl = pluggy.HookimplMarker("tt")  # the same marker as tt_host.hookspecs.hookimpl

NAME = "wandb"
_runs: dict[str, Any] = {}  # run_dir -> wandb Run


def _numbers(values: Any) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    return {str(k): float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _setting(settings: Mapping[str, Any], key: str, variable: str, default: str | None) -> str | None:
    value = settings.get(key)
    return str(value) if value not in (None, "") else (os.environ.get(variable) or default)


@hookimpl
def tt_run_start(run) -> None:
    settings = run.settings(NAME)
    if settings is None:
        return
    import wandb

    block = run.spec.get(run.engine)
    config = {"spec_name": run.spec_name, "engine": run.engine, "system_message_sha256": run.system_message_sha256,
              "tt_run_id": run.run_id, "run_dir": str(run.run_dir),
              **({run.engine: dict(block)} if isinstance(block, Mapping) else {})}
    folder = _setting(settings, "dir", "WANDB_DIR", str(run.run_dir))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    _runs[str(run.run_dir)] = wandb.init(
        mode=_setting(settings, "mode", "WANDB_MODE", "offline"),
        project=_setting(settings, "project", "WANDB_PROJECT", run.spec_name),
        entity=_setting(settings, "entity", "WANDB_ENTITY", None),
        dir=folder, name=run.run_id, config=config, reinit="create_new",
        settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
    )


@hookimpl
def tt_stage_event(run_dir: str, stage: str, event: Mapping[str, Any]) -> None:
    current = _runs.get(run_dir)
    if current is None:
        return
    kind, step = event.get("type"), event.get("step")
    if kind in ("progress", "metrics"):
        values = _numbers(event.get("metrics" if kind == "progress" else "values"))
        if values:
            row = {f"{stage}/{k}": v for k, v in values.items()}
            if isinstance(step, int) and not isinstance(step, bool):
                row[f"{stage}/step"] = step
            current.log(row)
    elif kind == "scores":
        current.summary.update(_numbers(event.get("values")))
    elif kind == "gate":
        current.summary.update({"gate/status": str(event.get("status")),
                                **{f"gate/{k}_delta": v for k, v in _numbers(event.get("delta")).items()}})


@hookimpl
def tt_run_end(run, report: Mapping[str, Any]) -> None:
    current = _runs.pop(str(run.run_dir), None)
    if current is None:
        return
    current.summary.update({**_numbers(report.get("metrics")), "tt/status": str(report.get("status"))})
    current.finish(exit_code=0 if report.get("status") == "completed" else 1)
