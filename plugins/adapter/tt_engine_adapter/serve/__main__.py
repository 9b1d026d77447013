"""Run the OpenAI-compatible server: `python -m tt_engine_adapter.serve REQUEST.json`.

REQUEST (written by `tt serve`, see docs/serving.md):

    {"model_path": "<HF model folder>", "adapter_path": "<PEFT folder>" | null,
     "model_name": "<id shown in /v1/models>", "system_message": "..." | null,
     "host": "127.0.0.1", "port": 8000, "max_concurrency": 8, "device": "auto",
     "ready_file": "<path>" | null, "allowed_hosts": ["name", ...],
     "default_max_tokens": N | null, "header_timeout": 10.0, "max_queue": 64,
     "queue_timeout": 60.0, "max_batch_tokens": N | null, "max_connections": 1000,
     "send_timeout": 30.0, "body_timeout": 30.0, "prefix_cache_mb": 256}

The request is tt_stagekit.contract.ServeRequest (its defaults are the ones
above, `tt serve`'s), parsed with tt_stagekit.stageconfig and checked with the
same `ServeRequest.check_bounds` that `tt serve` calls on its options; events
and exit codes are tt_stagekit's. `max_concurrency` sequences are decoded together (continuous batching,
`batching`); `max_queue` more requests wait for a place; more get 429.

The API key comes from the environment (`TT_SERVE_API_KEY`), never from the
request file; a key shorter than 16 characters, or a non-loopback host without
a key, is refused (exit 2) before the model loads, by the same
`tt_stagekit.addresses.check_api_key` that `tt serve` calls on its options. At most `max_connections`
connections are open (`protocol`: the longest-idle one is closed for a new one),
with the open-file limit raised to fit them (`fdlimit`). The model loads before the port is bound, so `/health`
answers only when the server is ready; then one JSON line
`{"type": "ready", "url": ...}` is printed (and written to `ready_file`).
SIGINT/SIGTERM shut down gracefully (in-flight requests get up to
`TT_SERVE_GRACE_SECONDS`, default 10 s; a second Ctrl-C stops at once) and
the process exits 130. Exit 2: invalid request or refused bind; 1: the model
could not load or the port could not be bound.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Optional

from tt_stagekit.addresses import check_api_key
from tt_stagekit.contract import EXIT_INTERRUPTED, EXIT_OK, ServeRequest
from tt_stagekit.protocol import InvalidInput, StageError, emit, log, run_entry
from tt_stagekit.stageconfig import parse


class Refused(InvalidInput):
    """Invalid request or unsafe settings: nothing was started (exit 2)."""


BACKLOG = 2048


class BindFailed(StageError):
    """The address could not be bound (in use, not local): exit 1."""


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def check(raw: Any) -> ServeRequest:
    """The typed request, refused (exit 2) when a value has the wrong type or is out of bounds, a folder is not
    what it should be, or a non-loopback host has no API key."""
    if not isinstance(raw, dict):
        raise Refused("the serve request must be a JSON object")
    request = parse(ServeRequest, raw, "serve request")
    for key in ("model_path", "model_name", "host"):
        if not getattr(request, key):
            raise Refused(f"serve request: {key!r} must be a non-empty string")
    request.check_bounds()
    if not (Path(request.model_path) / "config.json").is_file():
        raise Refused(f"{request.model_path}: not a Hugging Face model folder (no config.json)")
    for adapter in [request.adapter_path] + [a.path for a in request.served_models]:
        if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
            raise Refused(f"{adapter}: not a PEFT adapter folder (no adapter_config.json)")
    if not all(h.strip() for h in request.allowed_hosts or ()):
        raise Refused("serve request: 'allowed_hosts' must be a list of host names")
    check_api_key(os.environ.get("TT_SERVE_API_KEY"), request.host)
    return request


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise BindFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def serve(request: ServeRequest) -> int:
    import uvicorn

    from tt_engine_adapter.serve.app import create_app
    from tt_engine_adapter.serve.generation import BadSetting, ChatModel, set_threads
    from tt_engine_adapter.serve.fdlimit import fitted_cap, raise_soft_limit
    from tt_engine_adapter.serve.protocol import AcceptErrorFilter, hardened_protocol

    for sig in (signal.SIGINT, signal.SIGTERM):  # while loading, a signal stops at once
        signal.signal(sig, _interrupt)
    set_threads()
    max_connections = fitted_cap(request.max_connections, BACKLOG, raise_soft_limit(), log)
    log(f"loading {request.model_path}" + (f" with adapter {request.adapter_path}" if request.adapter_path else "")
        + (f" with {len(request.served_models)} adapters" if request.served_models else ""))
    try:
        model = ChatModel(request.model_path, request.adapter_path, request.device or "auto",
                          default_max_tokens=request.default_max_tokens)
    except BadSetting as exc:
        raise Refused(str(exc)) from None
    many = _many(model, request)
    app = create_app(model, model_name=request.model_name, system_message=request.system_message,
                     api_key=os.environ.get("TT_SERVE_API_KEY") or None,
                     max_concurrency=request.max_concurrency, max_queue=request.max_queue,
                     queue_timeout=request.queue_timeout, max_batch_tokens=request.max_batch_tokens,
                     bound_host=request.host, body_timeout=request.body_timeout,
                     allowed_hosts=list(request.allowed_hosts or ()),
                     sampling=(1.0 if request.default_temperature is None else request.default_temperature,
                               1.0 if request.default_top_p is None else request.default_top_p), many=many,
                     prefix_cache_mb=request.prefix_cache_mb)
    sock = bind(request.host, request.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    grace = float(os.environ.get("TT_SERVE_GRACE_SECONDS", "10"))
    config = uvicorn.Config(app, log_level=os.environ.get("TT_SERVE_LOG_LEVEL", "info"), lifespan="off",
                            timeout_graceful_shutdown=grace, server_header=False, backlog=BACKLOG,
                            http=hardened_protocol(request.header_timeout, request.send_timeout, max_connections))
    logging.getLogger("asyncio").addFilter(AcceptErrorFilter())
    server = uvicorn.Server(config)
    signals: list[int] = []

    def stop_after_startup(signum: int, frame: Any) -> None:
        """From the ready line until uvicorn takes the signals over (its own handlers), a signal makes it stop
        right after its startup instead of being lost; afterwards uvicorn re-raises the signal it shut down for
        into this handler, which records it (exit 130)."""
        signals.append(signum)
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop_after_startup)
    ready = {"type": "ready", "url": url, "model": request.model_name, "pid": os.getpid(),
             "context_length": model.context_length, "device": model.device,
             **({"models": [e.reference for e in many.catalog.entries()]} if many else {})}
    _announce(ready, request.ready_file)
    server.run(sockets=[sock])
    return EXIT_INTERRUPTED if signals or server.should_exit else EXIT_OK


def _many(model: Any, request: ServeRequest) -> Any:
    """A multi-adapter server's catalog and residency, the first `max_resident` adapters loaded (each checked
    against its pinned manifest first: one that fails stops the start, exit 1); None for one model. Every served
    adapter's config is checked first, loaded now or not: one the LoRA bank cannot apply stops the start (exit 2,
    each named), rather than a 503 at its first request."""
    if not request.served_models:
        return None
    from tt_engine_adapter.serve.adapters import Catalog, Residency
    from tt_engine_adapter.serve.hostlink import host_link
    from tt_engine_adapter.serve.lora_bank import Refused as Unsupported, read_config
    from tt_engine_adapter.serve.many import Many

    unsupported = []
    for served in request.served_models:
        try:
            read_config(served.path)
        except Unsupported as exc:
            unsupported.append(f"{served.name}: {exc}")
    if unsupported:
        raise InvalidInput("cannot serve these adapters together with others: " + "; ".join(unsupported)
                           + ". Serve each alone (`tt serve ID`), which applies any PEFT adapter")

    catalog = Catalog(request.served_models, request.activation_file)
    residency = Residency(model, request.max_resident, catalog)
    first = catalog.entries()[:request.max_resident or len(request.served_models)]
    failed = residency.ensure(first, set())
    if failed:
        raise StageError("; ".join(reason for _, reason in failed))
    return Many(catalog, residency, host_link(request.host_channel))


def _announce(ready: dict[str, Any], ready_file: Optional[str]) -> None:
    """Print the ready line; write ready_file once the socket listens (uvicorn accepts from the backlog)."""
    emit(ready)
    if ready_file:
        tmp = Path(f"{ready_file}.tmp")
        tmp.write_text(json.dumps(ready) + "\n")
        os.replace(tmp, ready_file)


def main(argv: Optional[list[str]] = None) -> int:
    return run_entry(lambda raw: serve(check(raw)), sys.argv[1:] if argv is None else argv,
                     "python -m tt_engine_adapter.serve REQUEST.json", what="serve request")


if __name__ == "__main__":
    sys.exit(main())
