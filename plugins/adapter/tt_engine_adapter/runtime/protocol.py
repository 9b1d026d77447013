"""The stage side of tt's stage protocol (docs/protocol.md).

Reads the request, emits JSON-line events on stdout, writes the result
atomically, turns SIGTERM/SIGINT into a flag checked at step boundaries, and
maps errors to the protocol's exit codes (1 failed, 2 invalid input,
130 interrupted). Under torchrun only the first rank of each node
(LOCAL_RANK 0) speaks to the host (events, result); the other ranks write
warnings and errors as plain text to stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_INTERRUPTED = 130


class StageError(Exception):
    """The stage failed (exit 1); the message says why."""

    exit_code = EXIT_FAILED


class InputError(StageError):
    """The stage's input is invalid (exit 2); raised before any work is done."""

    exit_code = EXIT_INVALID


class Interrupted(Exception):
    """Raised after the stage saved its state in answer to SIGTERM/SIGINT (exit 130)."""


class _StopFlag:
    """Set by SIGTERM/SIGINT; long loops poll it at step boundaries."""

    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        self.signal_name = signal.Signals(signum).name


STOP = _StopFlag()


def speaks() -> bool:
    """False only for ranks other than a node's first under torchrun."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def emit(event: Mapping[str, Any]) -> None:
    """Write one event as a JSON line on stdout and flush it."""
    if not speaks():
        if event.get("type") == "log" and event.get("level") in ("warning", "error"):
            sys.stderr.write(f"[rank {os.environ.get('RANK', '?')}] {event.get('level')}: {event.get('message')}\n")
            sys.stderr.flush()
        return
    sys.stdout.write(json.dumps(event, ensure_ascii=False, allow_nan=False) + "\n")
    sys.stdout.flush()


def log(message: str, level: str = "info") -> None:
    emit({"type": "log", "level": level, "message": message})


def progress(step: int, total: int | None, unit: str, metrics: Mapping[str, Any] | None = None) -> None:
    emit({"type": "progress", "step": step, "total": total, "unit": unit, "metrics": dict(metrics or {})})


def metrics(values: Mapping[str, Any], step: int | None = None) -> None:
    emit({"type": "metrics", "step": step, "values": dict(values)})


def artifact(kind: str, path: str | Path) -> None:
    emit({"type": "artifact", "kind": kind, "path": str(path)})


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int = 0o600) -> None:
    """Write `data` to `path` through a temp file in the same folder, fsync and rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: str | Path, value: Any) -> None:
    data = json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False, sort_keys=False) + "\n"
    atomic_write_bytes(path, data.encode("utf-8"))


def atomic_write_jsonl(path: str | Path, rows: list[Mapping[str, Any]]) -> None:
    data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    atomic_write_bytes(path, data.encode("utf-8"))


def read_request(argv: list[str] | None = None) -> dict[str, Any]:
    """Load the request named on the command line (or by TT_STAGE_REQUEST)."""
    args = sys.argv[1:] if argv is None else argv
    path = args[0] if args else os.environ.get("TT_STAGE_REQUEST")
    if not path:
        raise InputError("usage: python -m tt_engine_adapter.stages.<stage> REQUEST.json")
    try:
        request = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: request file not found") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(request, dict):
        raise InputError(f"{path}: the request must be a JSON object")
    for key in ("stage_dir", "result_path", "spec"):
        if key not in request:
            raise InputError(f"{path}: request field {key!r} is missing")
    request.setdefault("train_rows", [])
    request.setdefault("eval_prompts", [])
    request.setdefault("device", "auto")
    request.setdefault("resume", False)
    request.setdefault("stages", {})
    request.setdefault("fingerprint", "")
    request["_path"] = str(Path(path).resolve())
    Path(request["stage_dir"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    return request


def write_result(request: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    if not speaks():
        return
    body = {"status": "completed", "metrics": {}, "outputs": {}}
    body.update(result)
    atomic_write_json(request["result_path"], body)


def run_stage(main: Callable[[dict[str, Any]], Mapping[str, Any]], argv: list[str] | None = None) -> None:
    """Run a stage body: parse the request, call `main`, write its result, exit with the protocol's code."""
    STOP.install()
    code = 0
    try:
        request = read_request(argv)
        result = main(request)
        write_result(request, result)
        if "torch.distributed" in sys.modules:  # leave the process group (only after success)
            from tt_engine_adapter.runtime import distributed

            distributed.shutdown()
    except Interrupted as exc:
        log(str(exc) or "interrupted; state saved", "warning")
        code = EXIT_INTERRUPTED
    except KeyboardInterrupt:
        log("interrupted", "warning")
        code = EXIT_INTERRUPTED
    except StageError as exc:
        log(str(exc), "error")
        code = exc.exit_code
    except Exception as exc:  # noqa: BLE001 - report any failure as a protocol error
        sys.stderr.write(traceback.format_exc())
        log(f"{type(exc).__name__}: {exc}", "error")
        code = EXIT_FAILED
    sys.stdout.flush()
    sys.exit(code)
