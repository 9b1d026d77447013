"""`tt serve MODEL`: an OpenAI-compatible server for a trained model (logic in tt_host.models.serve)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from tt_host.cli.common import JsonOption, console, err, json_text, os_errors_refused
from tt_stagekit.contract import EXIT_INTERRUPTED, ServeRequest


def default(name: str) -> Any:
    """An option's default: the ServeRequest field's, so `tt serve` and a server reading a request without the
    field agree."""
    return ServeRequest.__dataclass_fields__[name].default


# The options `tt serve` shares with `tt chat` (which starts a server), each declared once with its help.
DeviceOption = typer.Option(default("device"), "--device", help="auto, cpu, cuda or mps.")
OfflineOption = typer.Option(False, "--offline", help="Build engine environments from uv's cache only.")
NoSpecPromptOption = typer.Option(False, "--no-spec-prompt", help="Do not apply the spec's compiled system message.")
SpecPromptOption = typer.Option(None, "--spec", help="Apply this spec's compiled system message instead of the one "
                                "recorded with the model.")


def show_event(event: dict[str, Any]) -> None:
    """A server event for a person: what the server writes is shown as text, never read as rich markup (a
    log line holding `[/x]` would otherwise replace the real message with a MarkupError)."""
    from rich.text import Text

    if event.get("type") == "ready":
        console.print(Text.assemble(("serving", "green"), f" {event.get('model')} at {event.get('url')}/v1 "
                                    f"(context {event.get('context_length')} tokens, {event.get('device')}); "
                                    "Ctrl-C stops"), highlight=False)
    elif event.get("type") == "log":
        style = {"error": "red", "warning": "yellow"}.get(str(event.get("level")), "")
        err.print(Text(str(event.get("message", "")), style=style), highlight=False)


def emit_line(event: dict[str, Any]) -> None:
    """One compact JSON object per line (--json): events arrive while the server runs."""
    sys.stdout.write(json_text(json.dumps(event, ensure_ascii=False, default=str)) + "\n")
    sys.stdout.flush()


def _spec_message(spec: Optional[Path], json_mode: bool) -> Optional[str]:
    """`--spec`: the spec's compiled system message (an invalid spec ends the command, exit 2)."""
    if spec is None:
        return None
    from tt_host.cli.running import load_valid

    _, loaded = load_valid(spec, json_mode)
    return loaded.compiled.system_message


def _apply_config(config: Path, log) -> None:
    """`--config`: a Node local-runner.json's Hugging Face cache for the server (HF_HOME); a key that only a run
    reads is warned about, a bad one refused (exit 2) naming it."""
    from tt_host.models.serve import ServeError
    from tt_host.spec import runner_config
    from tt_host.spec.loading import read_json

    path = config.expanduser().absolute()
    data, errors = read_json(path)
    if data is None:
        raise ServeError("; ".join(e.msg for e in errors))
    applied = runner_config.apply(data, {}, {"base_model", "device", "hyperparameters", "evaluation"}, str(path))
    if applied.errors:
        raise ServeError("; ".join(f"{e.loc}: {e.msg}" for e in applied.errors))
    runner_config.take_effect(applied.environment)
    for warning in applied.warnings:
        if "HF_HOME" in warning.msg:
            log(warning.msg, "warning")


def serve(
    ctx: typer.Context,
    model: Optional[list[str]] = typer.Argument(None, help="Registered model id (or its unique prefix, ID@n too), "
                                                "`active`, `base` (of the active model), run directory, or model "
                                                "folder (an export too). Several registered models of one base: "
                                                "one server holding the base once."),
    models_from: Optional[Path] = typer.Option(None, "--models-from", help="A file of registered model ids, one "
                                               "per line (# comments), served together with any MODEL given."),
    max_resident: Optional[int] = typer.Option(None, "--max-adapters", help="Models kept loaded at once (least "
                                               "recently used evicted, reloaded on demand; default: all)."),
    host: str = typer.Option(default("host"), "--host", help="Address to bind; anything but loopback needs an API key."),
    port: int = typer.Option(default("port"), "--port", help="Port to bind (0: any free port)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="TT_API_KEY", show_envvar=True,
                                          help="Require 'Authorization: Bearer KEY' on every /v1 request. On the "
                                               "command line it is visible in `ps`: prefer TT_API_KEY or "
                                               "--api-key-file."),
    api_key_file: Optional[Path] = typer.Option(None, "--api-key-file",
                                                help="Read the API key from this file (the key alone on one line)."),
    max_concurrency: int = typer.Option(default("max_concurrency"), "--max-concurrency",
                                        help="Requests generated together in one batch (1: one at a time)."),
    max_queue: int = typer.Option(default("max_queue"), "--max-queue", help="Requests that may wait for a place; more get 429."),
    queue_timeout: float = typer.Option(default("queue_timeout"), "--queue-timeout",
                                        help="Seconds a request may wait for a place before it gets 503."),
    max_batch_tokens: Optional[int] = typer.Option(default("max_batch_tokens"), "--max-batch-tokens",
                                                   help="Bound on the batch's KV cache: requests x longest (prompt + "
                                                        "max_tokens) (default: max-concurrency x context)."),
    max_connections: int = typer.Option(default("max_connections"), "--max-connections",
                                        help="Open connections allowed; one more closes the longest-idle one "
                                             "(503 when none is idle)."),
    prefix_cache_mb: int = typer.Option(default("prefix_cache_mb"), "--prefix-cache-mb",
                                        help="Memory (MiB) for the prompt start every request shares (system "
                                             "prompt, chat template), kept per model: later requests prefill "
                                             "only the rest. Least recently used dropped first; 0 turns it off."),
    allowed_host: list[str] = typer.Option([], "--allowed-host",
                                           help="Another name clients use for this server (Host header); "
                                                "repeatable. The bound address is always allowed."),
    default_max_tokens: Optional[int] = typer.Option(default("default_max_tokens"), "--default-max-tokens",
                                                     help="Answer budget of a request without max_tokens "
                                                          "(default: a quarter of the context, at most 256)."),
    no_spec_prompt: bool = NoSpecPromptOption,
    device: str = DeviceOption,
    offline: bool = OfflineOption,
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Sampling temperature of a request "
                                                "that sends none (default 1.0; 0 is greedy)."),
    top_p: Optional[float] = typer.Option(None, "--top-p", help="Nucleus sampling of a request that sends no "
                                          "top_p (default 1.0)."),
    spec: Optional[Path] = SpecPromptOption,
    config: Optional[Path] = typer.Option(None, "--config", help="A Node local-runner.json: its paths.modelCache "
                                          "(HF_HOME) applies; its other keys are warned about (docs/migrating.md)."),
    print_command: bool = typer.Option(False, "--print-command", help="Print the server's command and the "
                                       "resolved settings; start nothing."),
    json_mode: bool = JsonOption,
) -> None:
    """Serve MODEL at /v1/chat/completions (streaming too) and /v1/models until Ctrl-C.

    With --json, stdout carries one JSON event per line, among them
    {"type": "ready", "url": ...} once the server answers.
    """
    from tt_host.models.serve import ServeError, ServeOptions, is_many, plan, read_api_key_file, serve as run

    def log(line: str, level: str = "info") -> None:
        if json_mode:
            emit_line({"type": "log", "level": level, "message": line})
        else:
            err.print(line, markup=False)

    if api_key_file is not None:
        if api_key:
            raise ServeError("give the API key once: --api-key-file, or --api-key / TT_API_KEY, not both")
        api_key = read_api_key_file(api_key_file)
    elif api_key and getattr(ctx.get_parameter_source("api_key"), "name", "") == "COMMANDLINE":
        log("warning: --api-key on the command line is visible to every user of this machine (ps); "
            "use --api-key-file FILE or the TT_API_KEY environment variable", "warning")
    request = ServeRequest(host=host, port=port, max_concurrency=max_concurrency, device=device,
                           allowed_hosts=tuple(allowed_host), default_max_tokens=default_max_tokens,
                           max_queue=max_queue, queue_timeout=queue_timeout, max_batch_tokens=max_batch_tokens,
                           max_connections=max_connections, default_temperature=temperature,
                           default_top_p=top_p, max_resident=max_resident, prefix_cache_mb=prefix_cache_mb)
    if spec is not None and no_spec_prompt:
        raise ServeError("give --spec or --no-spec-prompt, not both")
    if config is not None:
        _apply_config(config, log)
    options = ServeOptions(request=request, api_key=api_key or None, spec_prompt=not no_spec_prompt,
                           offline=offline or None, system_message=_spec_message(spec, json_mode))
    references = list(model or [])
    if not references and models_from is None:
        raise ServeError("give MODEL (or several registered models of one base, or --models-from FILE); see `tt models list`")
    if print_command:
        from tt_host.cli.common import emit_json

        if is_many(references, models_from, options):
            raise ServeError("--print-command shows one model's server; give one MODEL")
        shown = plan(references[0], options)
        if json_mode:
            emit_json(shown)
        else:
            console.print(" ".join(shown["command"]), markup=False)
            console.print(json.dumps({k: v for k, v in shown.items() if k != "command"}, indent=2), markup=False)
        return

    def on_event(event: dict[str, Any]) -> None:
        emit_line(event) if json_mode else show_event(event)

    try:
        with os_errors_refused(json_mode):  # a path the OS refuses (a name too long): exit 2 naming it
            code = run(references, options, on_event, log, models_from)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    raise typer.Exit(code)
