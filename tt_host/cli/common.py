"""Helpers shared by the CLI modules: JSON output, errors with exit codes, the --json option, tables.

Every error tt reports is a `tt_host.errors.TTError`; `TTGroup`, the root group of `tt` (every sub-app's
command runs inside it), maps one that escapes a command onto `fail`: the message (or the `--json` error object, when
the command was given `--json`) and the error's `exit_code`. Commands raise; they do not catch to fail.

Text a user controls (paths, spec and run names, dataset keys, error messages
quoting them) is escaped before rich sees it (`escape`), so `[/x]` prints as
itself; everything printed, through the consoles, the plain tables or `emit_json`, is stripped of the
characters a terminal acts on (C0, C1, bidi controls: tt_host.terminal); nothing printed is wrapped (`soft_wrap`), so a path piped to a file or
`tee` stays on one line; tables are rich tables on a terminal and plain,
never-folded columns otherwise (`show_table`).
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Iterator, NoReturn, Optional

from typer._click.exceptions import UsageError  # typer 0.29 carries its own click
import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from tt_host.errors import TTError
from tt_host.terminal import TerminalConsole, clean, json_text

_JSON_SEEN = "tt.json"  # click's ctx.meta, shared by a command's context and its parents'


def _note_json(ctx: typer.Context, value: bool) -> bool:
    ctx.meta[_JSON_SEEN] = bool(value)
    return value


def json_option(help: str) -> Any:
    """A command's --json: every one is noted for TTGroup, so an error it ends with is JSON too."""
    return typer.Option(False, "--json", help=help, callback=_note_json)


JsonOption = json_option("Print one JSON object for scripts instead of tables.")


def _json_line() -> bool:
    """Whether this command line asks for JSON (tt_host.cli.nodeargs moved a global --json to its end)."""
    args = sys.argv[1:]
    return "--json" in (args[:args.index("--")] if "--" in args else args)


class TTGroup(TyperGroup):
    """The group of `tt` and its sub-apps: a TTError escaping a command ends it through `fail`; under --json a
    command line that does not parse is the failure envelope too (code "usage", exit 2), not click's text."""

    def make_context(self, info_name: Any, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except UsageError as exc:
            if not _json_line():
                raise
            fail(exc.format_message(), code=exc.exit_code, json_mode=True, kind="usage")

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TTError as exc:
            fail(str(exc), code=exc.exit_code, json_mode=ctx.meta.get(_JSON_SEEN, False))
        except UsageError as exc:
            if not _json_line():
                raise
            fail(exc.format_message(), code=exc.exit_code, json_mode=True, kind="usage")

console = TerminalConsole(highlight=False, soft_wrap=True)
err = TerminalConsole(stderr=True, highlight=False, soft_wrap=True)

__all__ = ["JsonOption", "TTGroup", "json_option", "clean", "console", "emit_json", "err", "escape", "fail", "json_text",
           "load_plugins", "os_errors_refused", "show_table"]


def _plain(cell: Any) -> str:
    if cell is None:
        return ""
    return cell.plain if isinstance(cell, Text) else str(cell)


def show_table(headers: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Print rows: a rich table on a terminal (cells are literal text; a `Text` cell keeps its style), plain
    left-aligned columns otherwise, each row on one line whatever its width."""
    if console.is_terminal:
        table = Table(*headers)
        for row in rows:
            table.add_row(*(cell if isinstance(cell, Text) else Text(_plain(cell)) for cell in row))
        console.print(table)
        return
    lines = [tuple(headers)] + [tuple(clean(_plain(c)).replace("\n", " ") for c in row) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    for line in lines:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


def emit_json(data: Any) -> None:
    sys.stdout.write(json_text(json.dumps(data, indent=2, ensure_ascii=False, default=str)) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 2, json_mode: bool = False, kind: Optional[str] = None, **extra: Any) -> NoReturn:
    """End the command with exit `code`: the message on stderr, or under --json the one failure envelope
    (tt_host.cli.jsonshapes) with `extra` beside it."""
    if json_mode:
        from tt_host.cli.jsonshapes import failure

        emit_json(failure(message, code, kind, **extra))
    else:
        err.print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(code)


@contextmanager
def os_errors_refused(json_mode: bool) -> Iterator[None]:
    """An OS error on a path the user gave (a name too long for the filesystem, a part of it that is a file,
    no permission) ends the command with exit 2 naming the path, instead of a traceback."""
    from tt_stagekit.userinput import os_reason

    try:
        yield
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        fail(f"{where}{os_reason(exc)}", code=2, json_mode=json_mode)


def load_plugins():
    """The plugins of this process (tt_host.plugins.plugins), imported when a command first needs them."""
    from tt_host.plugins import plugins

    return plugins()
