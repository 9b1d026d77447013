"""Run the OpenAI-compatible server: `python -m tt_engine_adapter.serve REQUEST.json`.

REQUEST (written by `tt serve`, see docs/serving.md):

    {"model_path": "<HF model folder>", "adapter_path": "<PEFT folder>" | null,
     "model_name": "<id shown in /v1/models>", "system_message": "..." | null,
     "host": "127.0.0.1", "port": 8000, "max_concurrency": 4, "device": "auto",
     "ready_file": "<path>" | null, "allowed_hosts": ["name", ...],
     "default_max_tokens": N | null, "header_timeout": 10.0, "max_queue": 64,
     "queue_timeout": 60.0, "max_batch_tokens": N | null}

`max_concurrency` sequences are decoded together (continuous batching,
`batching`); `max_queue` more requests wait for a place; more get 429.

The API key comes from the environment (`TT_SERVE_API_KEY`), never from the
request file. A non-loopback host without a key is refused (exit 2) before
the model loads. The model loads before the port is bound, so `/health`
answers only when the server is ready; then one JSON line
`{"type": "ready", "url": ...}` is printed (and written to `ready_file`).
SIGINT/SIGTERM shut down gracefully (in-flight requests get up to
`TT_SERVE_GRACE_SECONDS`, default 10 s; a second Ctrl-C stops at once) and
the process exits 130. Exit 2: invalid request or refused bind; 1: the model
could not load or the port could not be bound.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Optional

from tt_stagekit.addresses import is_loopback

EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 1, 2, 130
HEADER_TIMEOUT_SECONDS = 10.0
MAX_QUEUE, QUEUE_TIMEOUT_SECONDS = 64, 60.0


class Refused(Exception):
    """Invalid request or unsafe settings: nothing was started (exit 2)."""

    exit_code = EXIT_INVALID


class BindFailed(Refused):
    """The address could not be bound (in use, not local): exit 1."""

    exit_code = EXIT_FAILED


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def check(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise Refused("the serve request must be a JSON object")
    for key in ("model_path", "model_name", "host"):
        if not isinstance(request.get(key), str) or not request[key]:
            raise Refused(f"serve request: {key!r} must be a non-empty string")
    port, limit = request.get("port", 8000), request.get("max_concurrency", 4)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise Refused("serve request: 'port' must be an integer between 0 and 65535")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1024:
        raise Refused("serve request: 'max_concurrency' must be an integer between 1 and 1024")
    if not (Path(request["model_path"]) / "config.json").is_file():
        raise Refused(f"{request['model_path']}: not a Hugging Face model folder (no config.json)")
    adapter = request.get("adapter_path")
    if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
        raise Refused(f"{adapter}: not a PEFT adapter folder (no adapter_config.json)")
    if request.get("system_message") is not None and not isinstance(request["system_message"], str):
        raise Refused("serve request: 'system_message' must be a string or null")
    hosts = request.get("allowed_hosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h.strip() for h in hosts):
        raise Refused("serve request: 'allowed_hosts' must be a list of host names")
    default_max = request.get("default_max_tokens")
    if default_max is not None and (not isinstance(default_max, int) or isinstance(default_max, bool)
                                    or default_max < 1):
        raise Refused("serve request: 'default_max_tokens' must be a positive integer or null")
    timeout = request.get("header_timeout", HEADER_TIMEOUT_SECONDS)
    if not _number(timeout) or not 0 < timeout <= 3600:
        raise Refused("serve request: 'header_timeout' must be a number of seconds between 0 and 3600")
    queue, queue_timeout = request.get("max_queue", MAX_QUEUE), request.get("queue_timeout", QUEUE_TIMEOUT_SECONDS)
    if not isinstance(queue, int) or isinstance(queue, bool) or not 0 <= queue <= 100000:
        raise Refused("serve request: 'max_queue' must be an integer between 0 and 100000")
    if not _number(queue_timeout) or not 0 < queue_timeout <= 86400:
        raise Refused("serve request: 'queue_timeout' must be a number of seconds between 0 and 86400")
    batch_tokens = request.get("max_batch_tokens")
    if batch_tokens is not None and (not isinstance(batch_tokens, int) or isinstance(batch_tokens, bool)
                                     or batch_tokens < 1):
        raise Refused("serve request: 'max_batch_tokens' must be a positive integer or null")
    if not is_loopback(request["host"]) and not os.environ.get("TT_SERVE_API_KEY"):
        raise Refused(f"refusing to listen on {request['host']} without an API key: any address other than "
                      "loopback needs --api-key (or TT_API_KEY)")
    return {**request, "port": port, "max_concurrency": limit, "allowed_hosts": hosts,
            "default_max_tokens": default_max, "header_timeout": float(timeout), "max_queue": queue,
            "queue_timeout": float(queue_timeout), "max_batch_tokens": batch_tokens}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise BindFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(request: dict[str, Any]) -> int:
    import uvicorn

    from tt_engine_adapter.serve.app import create_app
    from tt_engine_adapter.serve.generation import BadSetting, ChatModel, set_threads
    from tt_engine_adapter.serve.protocol import protocol_with_header_timeout

    for sig in (signal.SIGINT, signal.SIGTERM):  # while loading, a signal stops at once
        signal.signal(sig, _interrupt)
    set_threads()
    emit({"type": "log", "level": "info", "message": f"loading {request['model_path']}"
          + (f" with adapter {request['adapter_path']}" if request.get("adapter_path") else "")})
    try:
        model = ChatModel(request["model_path"], request.get("adapter_path"), request.get("device") or "auto",
                          default_max_tokens=request["default_max_tokens"])
    except BadSetting as exc:
        raise Refused(str(exc)) from None
    signals: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):  # uvicorn re-raises the signal it shut down for, into these
        signal.signal(sig, lambda signum, frame: signals.append(signum))
    app = create_app(model, model_name=request["model_name"], system_message=request.get("system_message"),
                     api_key=os.environ.get("TT_SERVE_API_KEY") or None,
                     max_concurrency=request["max_concurrency"], max_queue=request["max_queue"],
                     queue_timeout=request["queue_timeout"], max_batch_tokens=request["max_batch_tokens"],
                     bound_host=request["host"],
                     allowed_hosts=request["allowed_hosts"])
    sock = bind(request["host"], request["port"])
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    grace = float(os.environ.get("TT_SERVE_GRACE_SECONDS", "10"))
    config = uvicorn.Config(app, log_level=os.environ.get("TT_SERVE_LOG_LEVEL", "info"), lifespan="off",
                            timeout_graceful_shutdown=grace, server_header=False,
                            http=protocol_with_header_timeout(request["header_timeout"]))
    server = uvicorn.Server(config)
    ready = {"type": "ready", "url": url, "model": request["model_name"], "pid": os.getpid(),
             "context_length": model.context_length, "device": model.device}
    _announce(ready, request.get("ready_file"))
    server.run(sockets=[sock])
    return EXIT_INTERRUPTED if signals or server.should_exit else 0


def _announce(ready: dict[str, Any], ready_file: Optional[str]) -> None:
    """Print the ready line; write ready_file once the socket listens (uvicorn accepts from the backlog)."""
    emit(ready)
    if ready_file:
        tmp = Path(f"{ready_file}.tmp")
        tmp.write_text(json.dumps(ready) + "\n")
        os.replace(tmp, ready_file)


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        emit({"type": "log", "level": "error", "message": "usage: python -m tt_engine_adapter.serve REQUEST.json"})
        return EXIT_INVALID
    try:
        raw = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        emit({"type": "log", "level": "error", "message": f"{argv[0]}: cannot read the serve request: {exc}"})
        return EXIT_INVALID
    try:
        return serve(check(raw))
    except Refused as exc:
        emit({"type": "log", "level": "error", "message": str(exc)})
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # model load failures and the like: say what, keep the traceback
        import traceback

        traceback.print_exc()
        emit({"type": "log", "level": "error", "message": f"{type(exc).__name__}: {exc}"})
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
