"""tt observer plugin: a run's numbers as TensorBoard event files in the run folder.

Active for a run when the spec's `observers` block has a `tensorboard` entry or
`TT_OBSERVERS` lists `tensorboard`. Settings (spec first, then environment):

- `logdir` / `TT_TENSORBOARD_LOGDIR`: where the event files go; relative to the
  run folder (default `tensorboard`, i.e. `<run_dir>/tensorboard`).

Scalars written (tag: step):
- `<stage>/<name>`: every number of a stage's `progress` (at its step) and
  `metrics` events (at its step, 0 when it has none), e.g. `pretrain/loss`;
- `scores/<name>`: the host-scored metrics of an evaluating stage (step 0);
- `gate/score_delta`, `gate/pass_rate_delta`, `gate/passed` (1 or 0): the
  general-regression gate when the spec has one;
- `final/<name>`: every number of the final report's `metrics`.

Uses tensorboard's own event writer (no torch, no TensorFlow). tensorboard is
imported when a run enables this observer, so plugin loading stays quick.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping

import pluggy

hookimpl = pluggy.HookimplMarker("tt")  # the same marker as tt_host.hookspecs.hookimpl

NAME = "tensorboard"
_writers: dict[str, Any] = {}  # run_dir -> EventFileWriter (tt calls one observer from one thread)


def _numbers(values: Any) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    return {str(k): float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def logdir(run_dir: str, settings: Mapping[str, Any]) -> str:
    chosen = str(settings.get("logdir") or os.environ.get("TT_TENSORBOARD_LOGDIR") or "tensorboard")
    return os.path.join(run_dir, os.path.expanduser(chosen))  # an absolute logdir replaces the run folder


def _write(run_dir: str, step: int, scalars: Mapping[str, float]) -> None:
    writer = _writers.get(run_dir)
    if writer is None or not scalars:
        return
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    summary = Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()])
    writer.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))


@hookimpl
def tt_run_start(run) -> None:
    settings = run.settings(NAME)
    if settings is None:
        return
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder = logdir(str(run.run_dir), settings)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    _writers[str(run.run_dir)] = EventFileWriter(folder, filename_suffix=f".{run.run_id}")


@hookimpl
def tt_stage_event(run_dir: str, stage: str, event: Mapping[str, Any]) -> None:
    if run_dir not in _writers:
        return
    kind, step = event.get("type"), event.get("step")
    step = step if isinstance(step, int) and not isinstance(step, bool) else 0
    if kind == "progress":
        _write(run_dir, step, {f"{stage}/{k}": v for k, v in _numbers(event.get("metrics")).items()})
    elif kind == "metrics":
        _write(run_dir, step, {f"{stage}/{k}": v for k, v in _numbers(event.get("values")).items()})
    elif kind == "scores":
        _write(run_dir, 0, {f"scores/{k}": v for k, v in _numbers(event.get("values")).items()})
    elif kind == "gate" and isinstance(event.get("delta"), Mapping):
        delta = _numbers(event["delta"])
        _write(run_dir, 0, {**{f"gate/{k}_delta": v for k, v in delta.items()},
                            "gate/passed": 1.0 if event.get("status") == "passed" else 0.0})
    elif kind == "stage_end":
        _writers[run_dir].flush()


@hookimpl
def tt_run_end(run, report: Mapping[str, Any]) -> None:
    run_dir = str(run.run_dir)
    if run_dir not in _writers:
        return
    _write(run_dir, 0, {f"final/{k}": v for k, v in _numbers(report.get("metrics")).items()})
    _writers.pop(run_dir).close()
