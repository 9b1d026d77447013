"""Helpers shared by the CLI modules: JSON output, errors with exit codes, the --json option."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console

JsonOption = typer.Option(False, "--json", help="Print one JSON object for scripts instead of tables.")

console = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 2, json_mode: bool = False, **extra: Any) -> NoReturn:
    if json_mode:
        emit_json({"ok": False, "error": message, **extra})
    else:
        err.print(f"[red]error:[/] {message}")
    raise typer.Exit(code)


def load_plugins():
    from tt_host.plugins import PluginLoadError, plugins

    try:
        return plugins()
    except PluginLoadError as exc:
        fail(f"{exc} (TT_PLUGINS_STRICT is set)", code=1)
