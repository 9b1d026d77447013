"""A stage the host runs itself (today: `synthesize`, tt_host.synthesis.stage), in place of a subprocess.

It looks to the run exactly like an engine stage: `<run>/<stage>/result.json`, its events as JSON lines in
`<run>/logs/<stage>.log` (so `tt runs events` reads them), `stage_start` / `stage_end` to the reporter and
observers, and a `StageOutcome`. SIGINT and SIGTERM set a stop while it runs: what the teacher already
answered is in the cache and the stage ends interrupted (exit 130), to resume where it stopped.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

from tt_host.errors import TTError
from tt_host.fsutil import make_private_dir, write_json_atomic
from tt_host.runs.invoke import StageCall, StageOutcome
from tt_host.runs.progress import problem_sink
from tt_host.runs.state import COMPLETED, FAILED, INTERRUPTED
from tt_host.synthesis.client import Stopped
from tt_host.synthesis.stage import run_synthesis
from tt_stagekit.contract import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK


class _StopOnSignal:
    """SIGINT / SIGTERM set `stop` instead of raising, for as long as the host stage runs."""

    def __init__(self, stop: threading.Event):
        self.stop = stop

    def __enter__(self) -> "_StopOnSignal":
        self.previous = {sig: signal.signal(sig, lambda signum, frame: self.stop.set())
                         for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def run_host_stage(call: StageCall) -> StageOutcome:
    run_call, stage = call.run_call, call.stage
    run, loaded = run_call.run, run_call.loaded
    stage_dir = make_private_dir(run.stage_dir(stage.name))
    make_private_dir(run.logs)
    result_path = run.result_path(stage.name)
    result_path.unlink(missing_ok=True)
    log_fd = os.open(run.logs / f"{stage.name}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    lock = threading.Lock()

    def on_event(event: dict[str, Any]) -> None:
        with lock:
            os.write(log_fd, (json.dumps(event, ensure_ascii=False) + "\n").encode("utf-8"))
        run_call.reporter.event(stage.name, event)
        run_call.observers.event(str(run.path), stage.name, event)

    def log(line: str) -> None:
        on_event({"type": "log", "level": "info", "message": line})

    def announce(line: str) -> None:  # on the terminal even with --json (stderr), and in the stage's log
        log(line)
        problem_sink(run_call.reporter)(line)

    run_call.reporter.stage_started(stage.name, stage.description)
    on_event({"type": "stage_start", "stage": stage.name, "resume": call.resume})
    started, stop = time.monotonic(), threading.Event()
    code, error, result = EXIT_OK, None, {}
    try:
        with _StopOnSignal(stop):
            result = run_synthesis(loaded.spec, loaded.path, loaded.compiled.system_message,
                                   list(loaded.compiled.train_rows),
                                   [row["messages"][-2]["content"] for row in loaded.compiled.eval_rows],
                                   stage_dir, stop, lambda kept, total: on_event(
                                       {"type": "progress", "step": kept, "total": total, "unit": "row", "metrics": {}}),
                                   log, announce)
        on_event({"type": "metrics", "step": None, "values": result["metrics"]})
        write_json_atomic(result_path, result)
    except Stopped:
        code, error = EXIT_INTERRUPTED, "interrupted; the teacher's answers so far are cached"
    except TTError as exc:
        code, error = exc.exit_code or EXIT_FAILED, str(exc)
        on_event({"type": "log", "level": "error", "message": error})
    except OSError as exc:
        code, error = EXIT_FAILED, f"{stage.name}: {exc}"
        on_event({"type": "log", "level": "error", "message": error})
    finally:
        seconds = time.monotonic() - started
        state = {EXIT_OK: COMPLETED, EXIT_INTERRUPTED: INTERRUPTED}.get(code, FAILED)
        on_event({"type": "stage_end", "stage": stage.name, "state": state, "exit_code": code})
        os.close(log_fd)
    run_call.reporter.stage_finished(stage.name, state, seconds)
    return StageOutcome(result if code == EXIT_OK else {}, code, error, seconds)
