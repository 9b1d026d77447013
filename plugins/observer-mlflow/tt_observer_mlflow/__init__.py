"""tt observer plugin: each tt run as an MLflow run.

Active for a run when the spec's `observers` block has an `mlflow` entry or
`TT_OBSERVERS` lists `mlflow`. Settings (spec first, then environment, then default):

- `tracking_uri` / `MLFLOW_TRACKING_URI`: default `./mlruns` in the current
  folder (a local file store, which MLflow 3 only opens with
  `MLFLOW_ALLOW_FILE_STORE=true`: this observer sets it for `file:` stores).
  A spec is often someone else's: its `tracking_uri` is used only when it is
  local, or when the user agrees to the remote one (`MLFLOW_TRACKING_URI` set
  to the same URI, or `TT_MLFLOW_SPEC_TRACKING_URI=1`); otherwise the observer
  refuses (reported once, the run goes on) and nothing is sent;
- `experiment` / `MLFLOW_EXPERIMENT_NAME`: default the spec's name.

Logged: params `spec_name`, `engine`, `system_message_sha256`, `tt_run_id`,
`run_dir` and every scalar of the engine's spec block (`<engine>.<key>`);
metrics `<stage>.<name>` from `progress`/`metrics` events at their steps, the
host-scored metrics as they are scored (`candidate.exact_match`, ...), the
gate (`gate.score_delta`, `gate.pass_rate_delta`, `gate.passed`), and at run
end every number of the report's `metrics`; the run ends FINISHED, FAILED or
KILLED (interrupted) with the tt status as tag `tt.status`. A resumed tt run
continues its MLflow run (its id is kept in `<run_dir>/observers/mlflow.json`).

mlflow is imported when a run enables this observer, so plugin loading stays quick.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Mapping

import pluggy

hookimpl = pluggy.HookimplMarker("tt")  # the same marker as tt_host.hookspecs.hookimpl

NAME = "mlflow"
STATUS = {"completed": "FINISHED", "interrupted": "KILLED"}
_runs: dict[str, tuple[Any, str]] = {}  # run_dir -> (MlflowClient, mlflow run id)


def _numbers(values: Any) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    return {str(k): float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


CONSENT = "TT_MLFLOW_SPEC_TRACKING_URI"  # the user's consent to a spec's own remote tracking URI


def is_local(uri: str) -> bool:
    return uri.startswith("file:") or "://" not in uri


def tracking_uri(settings: Mapping[str, Any]) -> str:
    """Where the run is logged. A spec is often shared: its `tracking_uri` may name a local store only, unless
    the user agrees to the remote one it names (MLFLOW_TRACKING_URI set to the same URI, or
    TT_MLFLOW_SPEC_TRACKING_URI=1); else ValueError, so no metric, parameter or path leaves the machine."""
    from_spec = str(settings.get("tracking_uri") or "")
    if from_spec and not is_local(from_spec) and from_spec != os.environ.get("MLFLOW_TRACKING_URI") and \
            os.environ.get(CONSENT, "") != "1":
        raise ValueError(f"observers.mlflow.tracking_uri {from_spec!r} in the spec sends this run's parameters, "
                         "metrics and paths to a remote server; nothing was sent. If you trust it, set "
                         f"MLFLOW_TRACKING_URI={from_spec} (or {CONSENT}=1) and resume; or remove it from the spec")
    uri = from_spec or os.environ.get("MLFLOW_TRACKING_URI") or ""
    return uri or Path("mlruns").resolve().as_uri()


def _log(run_dir: str, values: Mapping[str, float], step: int = 0) -> None:
    if run_dir not in _runs or not values:
        return
    from mlflow.entities import Metric

    client, run_id = _runs[run_dir]
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(key, value, now, step) for key, value in values.items()])


def _params(run) -> dict[str, str]:
    params = {"spec_name": run.spec_name, "engine": run.engine, "system_message_sha256": run.system_message_sha256,
              "tt_run_id": run.run_id, "run_dir": str(run.run_dir)}
    block = run.spec.get(run.engine)
    for key, value in (block.items() if isinstance(block, Mapping) else ()):
        if isinstance(value, (str, int, float, bool)):
            params[f"{run.engine}.{key}"] = str(value)[:6000]
    return params


@hookimpl
def tt_run_start(run) -> None:
    settings = run.settings(NAME)
    if settings is None:
        return
    uri = tracking_uri(settings)
    if is_local(uri):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    memo = Path(run.run_dir) / "observers" / "mlflow.json"
    known = json.loads(memo.read_text()) if run.resumed and memo.is_file() else {}
    if known.get("tracking_uri") == uri and known.get("run_id"):
        run_id = known["run_id"]
        client.update_run(run_id, status="RUNNING")
    else:
        name = str(settings.get("experiment") or os.environ.get("MLFLOW_EXPERIMENT_NAME") or run.spec_name)
        found = client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else client.create_experiment(name)
        run_id = client.create_run(experiment, run_name=run.run_id, tags={"tt.run_dir": str(run.run_dir)}).info.run_id
        from mlflow.entities import Param

        client.log_batch(run_id, params=[Param(k, v) for k, v in _params(run).items()])
        memo.parent.mkdir(mode=0o700, exist_ok=True)
        memo.write_text(json.dumps({"tracking_uri": uri, "run_id": run_id}) + "\n")
    _runs[str(run.run_dir)] = (client, run_id)


@hookimpl
def tt_stage_event(run_dir: str, stage: str, event: Mapping[str, Any]) -> None:
    if run_dir not in _runs:
        return
    kind, step = event.get("type"), event.get("step")
    step = step if isinstance(step, int) and not isinstance(step, bool) else 0
    if kind in ("progress", "metrics"):
        values = _numbers(event.get("metrics" if kind == "progress" else "values"))
        _log(run_dir, {f"{stage}.{k}": v for k, v in values.items()}, step)
    elif kind == "scores":
        _log(run_dir, _numbers(event.get("values")))
    elif kind == "gate" and isinstance(event.get("delta"), Mapping):
        _log(run_dir, {**{f"gate.{k}_delta": v for k, v in _numbers(event["delta"]).items()},
                       "gate.passed": 1.0 if event.get("status") == "passed" else 0.0})


@hookimpl
def tt_run_end(run, report: Mapping[str, Any]) -> None:
    run_dir = str(run.run_dir)
    if run_dir not in _runs:
        return
    _log(run_dir, _numbers(report.get("metrics")))
    client, run_id = _runs.pop(run_dir)
    status = str(report.get("status"))
    client.set_tag(run_id, "tt.status", status)
    if isinstance(report.get("general_regression"), Mapping):
        client.set_tag(run_id, "tt.gate", str(report["general_regression"].get("status")))
    client.set_terminated(run_id, status=STATUS.get(status, "FAILED"))
