"""`tt serve`: run the OpenAI-compatible server for a model, in the foreground (host side).

The server is an engine's declared one (`Engine.serve`, tt_host.engine.Serve):
`python -m MODULE REQUEST.json` in that engine's hashed environment. A model
of a SERVE_OWN kind goes to its own engine's server; every other model (a
Hugging Face folder, PEFT weights on their base, an engine format served through
its export) to a server that loads Hugging Face folders (`Serve.hf_folders`):
the model's own engine's when it has one, else the first such engine by name.
The host:

1. refuses a non-loopback `--host` without an API key (exit 2) before doing
   anything else;
2. resolves MODEL (`tt_host.models.references`); a model served through its export is
   first exported to a Hugging Face folder (`tt_host.models.export.serving_folder`, cached);
3. writes the request (the one `ServeRequest` of the options, completed with
   the model) into a private temporary folder (the API key goes to the child
   through the environment, never into a file);
4. runs the server in its own session with stdout parsed for JSON events (by a
   reader that survives its own errors, tt_host.engines.runner.OutputReader) and
   stderr (uvicorn's log) shown line by line, except known-harmless third-party lines (tt_host.engines.noise),
   which only the server log `TT_HOME/logs/serve.log` keeps (it keeps every line of both streams); Ctrl-C / SIGTERM are forwarded
   (the first asks for a graceful shutdown, a second Ctrl-C stops at once, and
   after the grace period, 30 s or `TT_SERVE_KILL_SECONDS`, the process group is killed).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import json
import subprocess
import sys
import tempfile
import threading
from types import SimpleNamespace
from pathlib import Path
from typing import Any, Callable, Optional

from tt_host.errors import TTError
from tt_host.engine import SERVE_EXPORT, SERVE_ON_BASE, SERVE_OWN, Engine
from tt_host.models.export import ExportError, engine_python, serving_folder
from tt_host.fsutil import write_json_atomic
from tt_host.models.references import ResolvedModel
from tt_host.models.serve_log import ServeLog
from tt_host.engines.isolation import python_command, python_env
from tt_host.engines.noise import NoiseFilter
from tt_host.engines.runner import OutputReader, SignalForwarder, parse_event
from tt_host.terminal import clean
from tt_stagekit.addresses import check_api_key
from tt_stagekit.contract import EXIT_INTERRUPTED, InvalidInput, ServeRequest
from tt_stagekit.userinput import InputFileError, read_regular

KILL_AFTER_SECONDS = 30.0  # TT_SERVE_KILL_SECONDS overrides it (tests: a short grace instead of waiting 30 s)


class ServeError(TTError):
    """`tt serve` cannot start as asked (exit 2) or its server failed (exit 1)."""

    exit_code = 2


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """`tt serve`'s options: the server's settings as the ServeRequest it is handed (its model fields are filled
    in once the model is resolved), and what only the host uses."""

    request: ServeRequest = dataclasses.field(default_factory=ServeRequest)
    api_key: Optional[str] = None  # to the server as TT_SERVE_API_KEY, never into the request file
    spec_prompt: bool = True
    offline: Optional[bool] = None
    system_message: Optional[str] = None  # `--spec`: this spec's compiled message instead of the model's recorded one


def check_options(options: ServeOptions) -> None:
    """Refusals that need nothing but the options (exit 2, nothing started)."""
    request = options.request
    if not request.host:
        raise ServeError("--host must not be empty")
    try:
        check_api_key(options.api_key, request.host)  # the engine's server checks the key it gets the same way
        request.check_bounds()  # the same check the engine's server makes on the request
    except InvalidInput as exc:
        raise ServeError(str(exc)) from None
    for name in request.allowed_hosts or ():
        if not _host_name_ok(name):
            raise ServeError(f"--allowed-host {name!r}: give a host name or address without port or scheme "
                             "(e.g. --allowed-host myserver.lan)")


def _host_name_ok(name: str) -> bool:
    """A bare host name or IP address: no scheme, port, path, user or wildcard."""
    if ":" in name:
        try:
            return ipaddress.ip_address(name.strip("[]")).version == 6
        except ValueError:
            return False
    return bool(name) and not any(c in name for c in "/@*?# \t")


MAX_KEY_FILE_BYTES = 64 * 1024  # an API key file holds one key


def read_api_key_file(path: Path) -> str:
    """The API key in PATH (surrounding whitespace removed); a missing, unreadable or empty file is exit 2."""
    try:  # a regular file only, capped: a FIFO or a link to /dev/zero is refused, never waited on or filled
        key = read_regular(path, MAX_KEY_FILE_BYTES).decode("utf-8").strip()
    except InputFileError as exc:
        raise ServeError(f"--api-key-file {exc}") from None
    except UnicodeDecodeError as exc:
        raise ServeError(f"--api-key-file {path}: cannot read it ({exc})") from None
    if not key or any(c.isspace() for c in key):
        raise ServeError(f"--api-key-file {path}: the file must hold the key alone on one line "
                         "(it is empty or has spaces inside)")
    return key


def build_request(model: ResolvedModel, options: ServeOptions, log: Callable[[str], None],
                  ready_file: Optional[Path]) -> ServeRequest:
    """The options' ServeRequest with the model to serve."""
    if model.form == SERVE_EXPORT:
        model_path, on_base = serving_folder(model, options.offline, log), None
    elif model.form == SERVE_ON_BASE:
        model_path, on_base = model.base_model_path, model.path
    else:
        model_path, on_base = model.path, None
    message = _system_message(model, options)
    if options.spec_prompt and message is None:
        log(f"no spec system message is recorded for {model.model_id}; serving without one")
    return dataclasses.replace(
        options.request, model_path=str(model_path), adapter_path=str(on_base) if on_base else None,
        model_name=model.model_id, system_message=message, ready_file=str(ready_file) if ready_file else None)


def _system_message(model: ResolvedModel, options: ServeOptions) -> Optional[str]:
    if not options.spec_prompt:
        return None
    return options.system_message if options.system_message is not None else model.system_message


def plan(reference: str, options: ServeOptions) -> dict[str, Any]:
    """What `tt serve` would start, started nothing (`--print-command`): the model, the server's command (its
    engine environment's python; `env_ready` false when `tt serve` would build it first), the URL and every
    setting of the request the server would read (the model path is the model's; an export-served model is
    exported when served)."""
    from tt_host.engines import envs
    from tt_host.models.references import resolve

    check_options(options)
    model = resolve(reference)
    engine = server_for(model)
    assert engine.serve is not None
    folder = envs.env_dir(engine)
    request = dataclasses.replace(
        options.request, model_path=str(model.base_model_path if model.form == SERVE_ON_BASE else model.path),
        adapter_path=str(model.path) if model.form == SERVE_ON_BASE else None, model_name=model.model_id,
        system_message=_system_message(model, options))
    return {"ok": True, "model_id": model.model_id, "engine": engine.name,
            "url": f"http://{request.host}:{request.port}/v1", "env_ready": envs.is_ready(folder),
            "command": python_command(envs.env_python(folder), ["-m", engine.serve.module, "serve-request.json"]),
            "settings": {**request.to_json(), "api_key": "set" if options.api_key else None}}


def server_for(model: ResolvedModel) -> Engine:
    """The installed engine whose declared server serves `model` (see the module docstring)."""
    from tt_host.plugins import UnknownEngineError, plugins

    engines = plugins().engines
    if model.form == SERVE_OWN:
        try:
            engine = plugins().engine(str(model.engine))
        except UnknownEngineError as exc:
            raise ServeError(f"{exc}; install the engine that made {model.model_id}", exit_code=2) from None
        if engine.serve is None:
            raise ServeError(f"engine {engine.name!r} declares no server, so its {model.kind!r} models cannot be "
                             "served; export the model instead (tt models export)", exit_code=2)
        return engine
    own = engines.get(str(model.engine))
    candidates = ([own] if own is not None else []) + [engines[name] for name in sorted(engines)]
    for engine in candidates:
        if engine.serve is not None and engine.serve.hf_folders:
            return engine
    raise ServeError(f"no installed engine declares a server for Hugging Face model folders, so {model.model_id} "
                     "cannot be served; install one (tt engines list shows each engine's server)", exit_code=2)


def run_process(command: list[str], env: dict[str, str], cwd: Path, on_event: Callable[[dict[str, Any]], None],
                answer: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None) -> tuple[int, bool, Optional[str]]:
    """Run the server command until it stops: its stdout read as events, its stderr shown line by line, known-
    harmless third-party lines of both only in the server log. Returns (exit code, signalled, reader error).
    `answer`: the server's `model_request` events are answered on its stdin, each in a thread of its own
    (tt_host.models.serve_many.answer), never shown."""
    with _server_log() as server_log:
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.PIPE if answer else subprocess.DEVNULL, start_new_session=True,
                                   text=True, bufsize=1, errors="replace")
        out_noise, err_noise = NoiseFilter(), NoiseFilter()
        replies = _Replies(process, answer) if answer else None

        def on_stdout(line: str) -> None:
            server_log.write(line if line.endswith("\n") else line + "\n")
            event = parse_event(line)
            if replies is not None and event.get("type") == "model_request":
                replies.start(event)
            elif not (event.get("raw") and out_noise.is_noise(line)):
                on_event(event)

        def on_stderr(line: str) -> None:
            server_log.write(line if line.endswith("\n") else line + "\n")
            if line.strip() and not err_noise.is_noise(line):  # a bar's closing newline is no line to show
                sys.stderr.write(clean(line.rstrip("\n")) + "\n")
                sys.stderr.flush()

        # Forward the signal received (a second SIGINT makes uvicorn stop at once); kill after the grace.
        kill_after = float(os.environ.get("TT_SERVE_KILL_SECONDS") or KILL_AFTER_SECONDS)
        with SignalForwarder(process, kill_after, forward_as=None, second_kills=False) as forwarder:
            reader = OutputReader(process.stdout, on_stdout, "server").start()
            errors = OutputReader(process.stderr, on_stderr, "server").start()
            code = forwarder.wait(reader.thread)
            reader.finish()
            errors.finish()
        reader.error = reader.error or errors.error
    return code, forwarder.signalled.is_set(), reader.error


def run_server(model: ResolvedModel, options: ServeOptions, on_event: Callable[[dict[str, Any]], None],
               log: Callable[[str], None], many: Optional[tuple[list[ResolvedModel], list[Any]]] = None) -> int:
    """Serve until the server stops; returns the exit code (130 after Ctrl-C / SIGTERM). `serve` checked the
    options. `many`: the models and ServedModels of a multi-model server (`model` is the first)."""
    engine = server_for(model)
    assert engine.serve is not None
    python = engine_python(engine.name, options.offline, log)
    answer = None
    with tempfile.TemporaryDirectory(prefix="tt-serve-") as tmp:
        if many is None:
            request = build_request(model, options, log, Path(tmp) / "ready.json")
        else:
            request, answer = _many_request(many, options, Path(tmp) / "ready.json")
        request_path = Path(tmp) / "serve-request.json"
        write_json_atomic(request_path, request.to_json())
        env = python_env(PYTHONUNBUFFERED="1")
        env.pop("TT_SERVE_API_KEY", None)
        if options.api_key:
            env["TT_SERVE_API_KEY"] = options.api_key
        code, signalled, error = run_process(python_command(python, ["-m", engine.serve.module, str(request_path)]),
                                             env, Path(tmp), on_event, answer)
    if error is not None and code == 0:  # reported when it happened; never a silent success
        return 1
    if code < 0 or (signalled and code in (0, EXIT_INTERRUPTED)):
        return EXIT_INTERRUPTED if signalled else 1
    return code


class _Replies:
    """Answers to the server's questions, written whole on its stdin (one JSON line each, under a lock)."""

    def __init__(self, process: subprocess.Popen, answer: Callable[[dict[str, Any]], dict[str, Any]]):
        self.process, self.answer, self.lock = process, answer, threading.Lock()

    def start(self, event: dict[str, Any]) -> None:
        threading.Thread(target=self._reply, args=(event,), daemon=True).start()

    def _reply(self, event: dict[str, Any]) -> None:
        try:
            reply = self.answer(event)
        except Exception as exc:  # never leave the server waiting on a question
            reply = {"ref": event.get("ref"), "error": f"tt could not resolve it: {clean(str(exc))}", "status": 400}
        line = json.dumps(reply, ensure_ascii=False) + "\n"
        with self.lock:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(line)
                self.process.stdin.flush()
            except (OSError, ValueError):  # the server is gone
                pass


def _server_log() -> ServeLog:
    from tt_host.models.registry import tt_home

    def warn(message: str) -> None:
        sys.stderr.write(f"warning: {clean(message)}\n")
        sys.stderr.flush()

    return ServeLog(tt_home() / "logs", warn=warn)


def _many_request(many: tuple[list[ResolvedModel], list[Any]], options: ServeOptions,
                  ready_file: Path) -> tuple[ServeRequest, Callable[[dict[str, Any]], dict[str, Any]]]:
    """A multi-model server's request (each model its own system message, or --spec's, or none with
    --no-spec-prompt) and the answer to its admin endpoint's questions."""
    from tt_host.models import activation, serve_many

    models, versions = many
    base = serve_many.base_key(models[0])

    def message(served: Any) -> Optional[str]:
        if not options.spec_prompt:
            return None
        return options.system_message if options.system_message is not None else served.system_message

    def answer(event: dict[str, Any]) -> dict[str, Any]:
        reply = serve_many.answer(event, base)
        if "model" in reply:
            reply["model"]["system_message"] = message(SimpleNamespace(**reply["model"]))
        return reply

    request = dataclasses.replace(
        options.request, model_path=str(models[0].base_model_path), adapter_path=None,
        model_name=versions[0].name, system_message=None, ready_file=str(ready_file),
        served_models=tuple(dataclasses.replace(v, system_message=message(v)) for v in versions),
        activation_file=str(activation.history_path()), host_channel=True)
    return request, answer


def is_many(references: list[str], models_file: Optional[Path], options: ServeOptions) -> bool:
    """Whether `tt serve` starts a multi-model server: several MODELs, --models-from or a resident bound."""
    return len(references) != 1 or models_file is not None or options.request.max_resident is not None


def serve(references: list[str], options: ServeOptions, on_event: Callable[[dict[str, Any]], None],
          log: Callable[[str], None], models_file: Optional[Path] = None) -> int:
    from tt_host.models.references import resolve

    check_options(options)
    many = None
    if is_many(references, models_file, options):
        from tt_host.models import serve_many

        listed = [(r, f"MODEL {r!r}") for r in references]
        listed += serve_many.read_models_file(models_file) if models_file is not None else []
        if not listed:
            raise ServeError("give MODEL or --models-from FILE")
        many = serve_many.resolve_many(listed)
        model = many[0][0]
    else:
        model = resolve(references[0])
    try:
        return run_server(model, options, on_event, log, many)
    except ExportError as exc:
        raise ServeError(str(exc), exc.exit_code) from None
