"""Where everything of a run lives: the run folder's names, in one place (docs/host.md, Runs).

    <spec folder>/.tuned-tensor/runs/<run id>/   the default run folder (`tt run SPEC` without --resume)
    <run>/run.json        engine, spec hash, versions, status, per-stage state and fingerprints (tt_host.runs.state)
    <run>/spec.json       the spec as validated for this run (frozen; updated only by a safe resume)
    <run>/<stage>/        one folder per stage: request.json, result.json, outputs
    <run>/logs/<stage>.log
    <run>/report.json, report.md
    <run>/.tt-run.lock    held (flock) by the process driving the run and by the stage processes it started
<run>/.tt-reserve     space held while tt drives the run, released when the disk fills so run.json and the
                      report still fit (removed when the run ends)
"""

from __future__ import annotations

RUNS_FOLDER = (".tuned-tensor", "runs")  # under the spec's folder
RUN_JSON = "run.json"
SPEC_JSON = "spec.json"
LOGS = "logs"
LOCK = ".tt-run.lock"
RESERVE = ".tt-reserve"
REQUEST = "request.json"
RESULT = "result.json"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
