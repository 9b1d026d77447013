"""The engine side of the tt stage protocol (see docs/protocol.md).

Reads the request, emits JSON-line events on stdout, writes files atomically,
turns SIGTERM/SIGINT into a flag the training loops check at step boundaries,
and maps errors onto the protocol's exit codes. Never imports tt_host.

Under torchrun only the first rank of each node (LOCAL_RANK 0) speaks to the
host: it emits events and writes result.json; the other ranks write their log
lines as plain text to stderr (kept in the stage log) and no result.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_INTERRUPTED = 130


class StageError(Exception):
    """A failure the user can act on; the message names the file/line or field."""

    exit_code = EXIT_FAILED


class InvalidInput(StageError):
    """The stage found its input invalid before doing any work (exit 2)."""

    exit_code = EXIT_INVALID


class Interrupted(Exception):
    """Raised after the stage saved its state in answer to SIGTERM/SIGINT."""


class _StopFlag:
    def __init__(self) -> None:
        self.requested = False
        self.signum: Optional[int] = None

    def __call__(self, signum: int, frame: Any) -> None:  # signal handler
        if self.requested:
            # A second signal: stop at once.
            os._exit(EXIT_INTERRUPTED)
        self.requested = True
        self.signum = signum


STOP = _StopFlag()


def install_signal_handlers() -> None:
    signal.signal(signal.SIGTERM, STOP)
    signal.signal(signal.SIGINT, STOP)


def stop_requested() -> bool:
    return STOP.requested


def speaks() -> bool:
    """Whether this process talks to the host (always, except ranks other than a node's first under torchrun)."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def emit(event: Mapping[str, Any]) -> None:
    if not speaks():
        if event.get("type") == "log" and event.get("level") in ("warning", "error"):
            sys.stderr.write(f"[rank {os.environ.get('RANK', '?')}] {event.get('level')}: {event.get('message')}\n")
            sys.stderr.flush()
        return
    sys.stdout.write(json.dumps(event, default=_json_default) + "\n")
    sys.stdout.flush()


def log(message: str, level: str = "info") -> None:
    emit({"type": "log", "level": level, "message": message})


def progress(step: int, total: Optional[int], unit: str, metrics: Mapping[str, Any]) -> None:
    emit({"type": "progress", "step": step, "total": total, "unit": unit, "metrics": dict(metrics)})


def metrics(values: Mapping[str, Any], step: Optional[int] = None) -> None:
    emit({"type": "metrics", "step": step, "values": dict(values)})


def artifact(kind: str, path: str | Path) -> None:
    emit({"type": "artifact", "kind": kind, "path": str(path)})


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def fsync_dir(path: str | Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int = 0o600) -> None:
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
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: str | Path, value: Any) -> None:
    text = json.dumps(value, indent=2, sort_keys=True, default=_json_default) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def read_request(path: Optional[str] = None) -> dict[str, Any]:
    if path is None:
        if len(sys.argv) > 1:
            path = sys.argv[1]
        else:
            path = os.environ.get("TT_STAGE_REQUEST")
    if not path:
        raise InvalidInput("usage: python -m <stage module> REQUEST.json")
    try:
        with open(path, "r", encoding="utf-8") as handle:
            request = json.load(handle)
    except FileNotFoundError:
        raise InvalidInput(f"{path}: request file not found") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}:{exc.lineno}: request is not valid JSON: {exc.msg}") from None
    for key in ("run_dir", "stage_dir", "result_path", "spec"):
        if key not in request:
            raise InvalidInput(f"{path}: request has no {key!r}")
    return request


def write_result(request: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    if not speaks():
        return
    body = {"status": "completed", "metrics": {}, "series": {}, "outputs": {}, "artifacts": [], "notes": []}
    body.update(result)
    atomic_write_json(request["result_path"], body)


def main(run: Callable[[dict[str, Any]], Mapping[str, Any]]) -> None:
    """Run a stage function: request in, result out, exit code per the protocol."""
    install_signal_handlers()
    try:
        request = read_request()
        result = run(request)
        write_result(request, result)
        _leave_process_group()  # only after success: a failed NCCL group may not shut down cleanly
    except Interrupted as exc:
        log(str(exc) or "interrupted; state saved", "warning")
        sys.exit(EXIT_INTERRUPTED)
    except StageError as exc:
        log(str(exc), "error")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        log("interrupted", "warning")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # a bug or an environment problem: keep the traceback
        sys.stderr.write(traceback.format_exc())
        log(f"{type(exc).__name__}: {exc}", "error")
        sys.exit(EXIT_FAILED)
    sys.exit(EXIT_OK)


def _leave_process_group() -> None:
    if "torch.distributed" in sys.modules:
        from . import distributed

        distributed.shutdown()


def file_digest(path: str | Path, chunk: int = 1 << 20) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: str | Path, kind: str, extra: Mapping[str, Any]) -> Path:
    """Write artifact-manifest.json listing every file (size, sha256) in directory."""
    import datetime

    directory = Path(directory)
    files = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel == "artifact-manifest.json":
            continue
        files.append({"path": rel, "size": path.stat().st_size, "sha256": file_digest(path)})
    manifest = {
        "format": 1,
        "kind": kind,
        "engine": "foundation",
        "files": files,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    manifest.update(extra)
    target = directory / "artifact-manifest.json"
    atomic_write_json(target, manifest)
    return target
