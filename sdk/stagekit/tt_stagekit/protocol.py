"""The stage side of tt's stage protocol (docs/protocol.md), shared by the engines.

Reads the request, emits JSON-line events on stdout, writes the result,
turns SIGTERM/SIGINT into a flag long loops check at step boundaries (copies
of one stop request arriving together count once; a second request exits at
once: tt_stagekit.signals), stops the stage when the `tt` that started it dies,
and maps errors onto the protocol's exit codes (0 completed, 1 failed, 2 invalid
input, 130 interrupted). What crosses the process boundary (exit codes, errors,
request and result fields) is defined in tt_stagekit.contract, and re-exported
here for stage code (`from tt_stagekit.protocol import InvalidInput`); atomic
writes and folders are tt_stagekit.files. Stdlib only; never imports tt_host.

Under torchrun only the first rank of each node (LOCAL_RANK 0) speaks to the
host: it emits events and writes result.json; the other ranks write warnings
and errors as plain text to stderr (kept in the stage log) and no result.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, TextIO

from tt_stagekit import signals
from tt_stagekit.contract import (  # noqa: F401 (the errors and exit codes are re-exported for stage code)
    EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, InvalidInput, Interrupted, StageError, StageResult,
    request_defaults, required_request_fields, result_body,
)
from tt_stagekit.files import atomic_write_json, json_default
from tt_stagekit.stageconfig import parse_request


class StopFlag:
    """Set by the first SIGTERM/SIGINT (or by the death of the host); long loops poll it at step boundaries.

    Signals within the window of the first are copies of the same request (a supervisor signalled every
    process, and tt or torchrun forwarded theirs) and change nothing; a signal after the window is a
    second request and exits at once (130) without saving.
    """

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""
        self.requests = signals.StopRequests()

    def install(self) -> None:
        self.requests = signals.StopRequests()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)
        signals.watch_host()

    def request(self, reason: str) -> None:
        if not self.requested:
            self.requested, self.signal_name = True, reason

    def _handle(self, signum: int, frame: Any) -> None:
        verdict = self.requests.receive()
        if verdict == signals.AGAIN:
            os._exit(EXIT_INTERRUPTED)
        if verdict == signals.FIRST:
            name = signal.Signals(signum).name
            self.request(name if signals.host_alive() else f"{name} (tt exited)")


STOP = StopFlag()


def stop_requested() -> bool:
    return STOP.requested


def speaks() -> bool:
    """Whether this process talks to the host (always, except ranks other than a node's first under torchrun)."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def emit(event: Mapping[str, Any]) -> None:
    """Write one event as a JSON line on stdout and flush it."""
    if not speaks():
        if event.get("type") == "log" and event.get("level") in ("warning", "error"):
            _write(sys.stderr, f"[rank {os.environ.get('RANK', '?')}] {event.get('level')}: {event.get('message')}\n")
        return
    _write(sys.stdout, json.dumps(event, ensure_ascii=False, default=json_default) + "\n")


def _write(stream: TextIO, text: str) -> None:
    """Write and flush; when the host's pipe is closed (tt died), keep writing to the stage log and stop."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        signals.host_gone()
        STOP.request("tt exited")
        with contextlib.suppress(OSError, ValueError):  # the failed write's text was dropped: write it again
            stream.write(text)
            stream.flush()


def log(message: str, level: str = "info") -> None:
    emit({"type": "log", "level": level, "message": message})


def progress(step: int, total: Optional[int], unit: str, metrics: Optional[Mapping[str, Any]] = None) -> None:
    emit({"type": "progress", "step": step, "total": total, "unit": unit, "metrics": dict(metrics or {})})
    _hold_for_a_stop(step, unit)


HOLD_ENV = "TT_HOLD_AT_STEP"


def _hold_for_a_stop(step: int, unit: str) -> None:
    """For tests of stopping and killing: with TT_HOLD_AT_STEP=N, a stage that reported step N or later waits
    there until a stop is requested (or it is killed), so a short run cannot end before the test's signal."""
    try:
        at = int(os.environ.get(HOLD_ENV, ""))
    except ValueError:
        return
    if unit != "step" or step < at or not speaks():
        return
    while not STOP.requested:
        time.sleep(0.01)


def metrics(values: Mapping[str, Any], step: Optional[int] = None) -> None:
    emit({"type": "metrics", "step": step, "values": dict(values)})


def artifact(kind: str, path: str | Path) -> None:
    emit({"type": "artifact", "kind": kind, "path": str(path)})


def read_request(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Load the request named on the command line (or by TT_STAGE_REQUEST); optional fields get their defaults."""
    args = sys.argv[1:] if argv is None else list(argv)
    path = args[0] if args else os.environ.get("TT_STAGE_REQUEST")
    if not path:
        raise InvalidInput("usage: python -m <stage module> REQUEST.json (or set TT_STAGE_REQUEST)")
    try:
        request = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"{path}: request file not found") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}:{exc.lineno}: request is not valid JSON: {exc.msg}") from None
    if not isinstance(request, dict):
        raise InvalidInput(f"{path}: the request must be a JSON object")
    for key in required_request_fields():
        if key not in request:
            raise InvalidInput(f"{path}: request field {key!r} is missing")
    for key, default in request_defaults().items():
        request.setdefault(key, default)
    Path(request["stage_dir"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    return request


def write_result(request: Any, result: Mapping[str, Any] | StageResult) -> None:
    """result.json with the protocol's defaults for what the stage left out (first rank of each node only).

    `request` is the request's dict or its typed StageRequest; `result` the StageResult a stage body returned
    (stages build one, with `Artifact` records), or a dict, which engines written before StageResult still
    return (written as `contract.result_body` orders it, the same bytes as the StageResult of the same fields)."""
    if not speaks():
        return
    path = request["result_path"] if isinstance(request, Mapping) else request.result_path
    atomic_write_json(path, result_body(result.to_json() if isinstance(result, StageResult) else result))


def run_main(body: Callable[[Any], StageResult | Mapping[str, Any]], argv: Optional[Sequence[str]] = None,
             request_type: Optional[type] = None) -> None:
    """A stage module's entry point: `if __name__ == "__main__": run_main(main)`.

    Reads the request, calls the stage's `main(request)`, writes the StageResult it returns and exits with the
    protocol's code. (`tt_host.engines.runner.run_stage` is the other side: it starts this process.)

    With `request_type` (a `tt_stagekit.stageconfig.StageRequest` dataclass) `body` receives the request
    parsed into it once, here; a wrong value exits 2 naming the field, before the stage does any work.
    """
    STOP.install()
    code = EXIT_OK
    try:
        request = read_request(argv)
        if request_type is not None:
            write_result(request, body(parse_request(request_type, request)))
        else:
            write_result(request, body(request))
        _leave_process_group()  # only after success: a failed NCCL group may not shut down cleanly
    except Interrupted as exc:
        log(str(exc) or "interrupted; state saved", "warning")
        code = EXIT_INTERRUPTED
    except KeyboardInterrupt:
        log("interrupted", "warning")
        code = EXIT_INTERRUPTED
    except StageError as exc:
        log(str(exc), "error")
        code = exc.exit_code
    except Exception as exc:  # a bug or an environment problem: keep the traceback
        sys.stderr.write(traceback.format_exc())
        log(f"{type(exc).__name__}: {exc}", "error")
        code = EXIT_FAILED
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    # The last collection at interpreter exit walks every object torch and its imports created: seconds
    # on a loaded CPU, between a stop's checkpoint and the exit a supervisor waits for. Nothing left needs it.
    gc.freeze()
    sys.exit(code)


def run_entry(body: Callable[[dict[str, Any]], int], argv: Sequence[str], usage: str, what: str = "request") -> int:
    """Run an engine entry point outside a run's stage loop (export, the server): `argv` is [REQUEST.json];
    `body` gets the request object and returns the exit code. Returns the protocol's exit code: errors are
    log events naming what failed, tracebacks go to stderr, Ctrl-C/SIGTERM as KeyboardInterrupt is 130."""
    if len(argv) != 1:
        log(f"usage: {usage}", "error")
        return EXIT_INVALID
    try:
        request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        log(f"{argv[0]}: cannot read the {what}: {exc}", "error")
        return EXIT_INVALID
    try:
        if not isinstance(request, dict):
            raise InvalidInput(f"{argv[0]}: the {what} must be a JSON object")
        return body(request)
    except StageError as exc:
        log(str(exc), "error")
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug or a broken model: keep the traceback
        sys.stderr.write(traceback.format_exc())
        log(f"{type(exc).__name__}: {exc}", "error")
        return EXIT_FAILED


def run_command(body: Callable[[dict[str, Any]], str], argv: Sequence[str], usage: str) -> int:
    """A one-shot engine command (export): `body` returns a summary line, logged when it succeeds."""

    def logged(request: dict[str, Any]) -> int:
        log(body(request))
        return EXIT_OK

    return run_entry(logged, argv, usage)


def run_export(export: Callable[[dict[str, Any]], Path], argv: Optional[Sequence[str]], usage: str) -> int:
    """An engine's export command (`python -m <engine>.stages.export… REQUEST.json`, argv None: sys.argv[1:]):
    `export` returns the folder it wrote; the summary line says how many files it holds."""
    from tt_stagekit.manifest import MANIFEST

    def summary(request: dict[str, Any]) -> str:
        out = export(request)
        return f"export complete: {len(list(out.iterdir()))} files, listed with sha256 in {MANIFEST}"

    return run_command(summary, sys.argv[1:] if argv is None else argv, usage)


def _leave_process_group() -> None:
    if "torch.distributed" in sys.modules:
        from tt_stagekit import distributed

        distributed.shutdown()
