"""`tt serve MODEL`: an OpenAI-compatible server for a trained model (logic in tt_host.serve)."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

import typer

from tt_host.cli.common import JsonOption, console, err, escape, fail


def emit_line(event: dict[str, Any]) -> None:
    """One compact JSON object per line (--json): events arrive while the server runs."""
    sys.stdout.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def serve(
    model: str = typer.Argument(..., help="Registered model id, `active`, `base` (of the active model), run directory, "
                                                  "or model folder (an export too)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything but loopback needs an API key."),
    port: int = typer.Option(8000, "--port", help="Port to bind (0: any free port)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="TT_API_KEY", show_envvar=True,
                                          help="Require 'Authorization: Bearer KEY' on every /v1 request."),
    max_concurrency: int = typer.Option(4, "--max-concurrency", help="Requests accepted at once; more get 429."),
    no_spec_prompt: bool = typer.Option(False, "--no-spec-prompt",
                                        help="Do not apply the spec's compiled system message."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or mps."),
    offline: bool = typer.Option(False, "--offline", help="Build engine environments from uv's cache only."),
    json_mode: bool = JsonOption,
) -> None:
    """Serve MODEL at /v1/chat/completions (streaming too) and /v1/models until Ctrl-C.

    With --json, stdout carries one JSON event per line, among them
    {"type": "ready", "url": ...} once the server answers.
    """
    from tt_host.modelref import ModelRefError
    from tt_host.serve import ServeError, ServeOptions, serve as run

    options = ServeOptions(host=host, port=port, api_key=api_key or None, max_concurrency=max_concurrency,
                           spec_prompt=not no_spec_prompt, device=device, offline=offline or None)

    def log(line: str) -> None:
        if json_mode:
            emit_line({"type": "log", "level": "info", "message": line})
        else:
            err.print(line, markup=False)

    def on_event(event: dict[str, Any]) -> None:
        if json_mode:
            emit_line(event)
        elif event.get("type") == "ready":
            console.print(f"[green]serving[/] {escape(str(event['model']))} at {event['url']}/v1 "
                          f"(context {event.get('context_length')} tokens, {event.get('device')}); Ctrl-C stops")
        elif event.get("type") == "log":
            style = {"error": "red", "warning": "yellow"}.get(str(event.get("level")), "")
            message = str(event.get("message", ""))
            err.print(f"[{style}]{message}[/]" if style else message, markup=bool(style), highlight=False)

    try:
        code = run(model, options, on_event, log)
    except (ServeError, ModelRefError) as exc:
        fail(str(exc), code=exc.exit_code, json_mode=json_mode)
    except KeyboardInterrupt:
        code = 130
    raise typer.Exit(code)
