"""`tt` and `tt --help` without typer: the top-level help drawn by hand, as typer and rich draw it.

typer, rich, pydantic, pluggy and the plugins take most of a second to import
on a slow machine; the top-level help needs none of them. `render(width, colour)`
draws the same characters (and, in colour, the same escape sequences) that
typer's rich help prints for the app in tt_host.cli.main, from the data in
tt_host.cli.toplevel; tests/host/cli/test_fast_help.py compares the two at every width
from MIN_WIDTH up and fails when they differ.

`for_stdout()` answers only where the output is certain to be the same: a
Linux or macOS process named `tt`, UTF-8 standard output, none of the
environment variables that change how rich or typer print, a width of at least
MIN_WIDTH columns and text that rich would print as it is (no markup, emoji
codes or option names to highlight). Anywhere else it returns None and the
typer app prints the help as before.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Mapping, Optional, TextIO

from tt_host.cli import toplevel

MIN_WIDTH = 60  # narrower, the options' help soon wraps, where rich's table layout (not copied here) decides
# Variables that change what rich or typer print (colour, width, terminal detection, rich help on or off).
_ENVIRONMENT = ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE",
                "TERMINAL_WIDTH", "TYPER_USE_RICH", "_TYPER_FORCE_DISABLE_TERMINAL", "JUPYTER_COLUMNS",
                "JUPYTER_LINES", "DATABRICKS_RUNTIME_VERSION", "_TT_COMPLETE")

# typer's styles (typer.rich_utils) as the SGR codes rich writes for them.
_BOLD, _USAGE, _BORDER, _OPTION, _TYPE, _TYPE_SEP, _COMMAND = "1", "1;33", "2", "1;36", "1;33", "1;2;33", "1;36"

# Text typer would not print as it is: what typer's highlighter colours (-x, --name, <type>, "Usage: "),
# and in help text (read as rich markup) markup, emoji codes and escape sequences.
_HIGHLIGHTED = re.compile(r"(^|\W)-\w|<[^>]+>|Usage: ")
_MARKUP = re.compile(r"[\[\]\x1b\t]|:[^\s:]*:")
_WORD = re.compile(r"\s*\S+\s*")

Segment = tuple[str, str]  # (text, SGR codes; "" for none)


def _plain(text: str, markup: bool = True) -> bool:
    return (text.isascii() and text.isprintable() and not _HIGHLIGHTED.search(text)
            and not (markup and _MARKUP.search(text)))


def _wrap(text: str, width: int) -> Optional[list[str]]:
    """Lines of `width` characters, broken where rich breaks them (rich._wrap.divide_line); None when a
    word is longer than a line (rich would fold it)."""
    lines = []
    for paragraph in text.split("\n"):
        line, offset = "", 0
        for word in _WORD.findall(paragraph):
            length = len(word.rstrip())
            if length > width:
                return None
            if width - offset < length and offset:
                lines.append(line)
                line, offset = "", 0
            line += word
            offset += len(word)
        lines.append(line)
    # rich crops a line's trailing spaces only past the width, then pads it to the width
    return [(line.rstrip() if len(line) > width else line).ljust(width) for line in lines]


def _panel(title: str, rows: list[list[Segment]], width: int) -> list[list[Segment]]:
    """A rounded, dim-bordered panel with its title on the left, one space inside each side."""
    top = [("╭─", _BORDER), (f" {title} ", _BORDER), ("─" * (width - len(title) - 6), _BORDER), ("─╮", _BORDER)]
    body = [[("│", _BORDER), (" ", "")] + row + [(" ", ""), ("│", _BORDER)] for row in rows]
    return [top] + body + [[("╰" + "─" * (width - 2) + "╯", _BORDER)]]


def _option_rows(width: int) -> Optional[list[list[Segment]]]:
    names = max(len(name) for name, _, _ in toplevel.OPTIONS)
    types = max(len(kind) for _, kind, _ in toplevel.OPTIONS)
    # columns: option, three empty ones (short name, negative forms), type, help; one space either side of
    # each except the outer edges
    help_width = width - 4 - (names + 1) - 3 * 2 - (types + 2) - 1
    rows = []
    for name, kind, text in toplevel.OPTIONS:
        if not re.fullmatch(r"--[a-z]+", name) or not re.fullmatch(r"<[a-z]+>", kind) or not _plain(text):
            return None
        if len(text) > help_width:
            return None
        rows.append([("-", _OPTION), (name[1:], _OPTION), (" " * (names - len(name) + 1 + 6 + 1), ""),
                     ("<", _TYPE_SEP), (kind[1:-1], _TYPE), (">", _TYPE_SEP),
                     (" " * (types - len(kind) + 2) + text.ljust(help_width), "")])
    return rows


def _command_rows(width: int) -> Optional[list[list[Segment]]]:
    names = max(len(name) for name, _ in toplevel.COMMANDS)
    help_width = width - 4 - (names + 1) - 1
    rows = []
    for name, text in toplevel.COMMANDS:
        lines = _wrap(text, help_width) if _plain(text.replace("\n", " ")) else None
        if lines is None:
            return None
        rows.append([(name.ljust(names), _COMMAND), (" ", _COMMAND), (" " + lines[0], "")])
        rows.extend([(" " * (names + 1), _COMMAND), (" " + line, "")] for line in lines[1:])
    return rows


def render(width: int, colour: bool) -> Optional[str]:
    """The top-level help as typer prints it at `width` columns (with escape sequences when `colour`),
    or None where this copy cannot be sure to match."""
    usage = f"Usage: {toplevel.USAGE}"
    help_lines = _wrap(toplevel.HELP, width - 2) if _plain(toplevel.HELP) else None
    options, commands = _option_rows(width), _command_rows(width)
    if (width < MIN_WIDTH or len(usage) > width - 2 or not _plain(toplevel.USAGE, markup=False) or help_lines is None
            or options is None or commands is None):
        return None
    lines: list[list[Segment]] = [[(" " * width, _BOLD)]]
    lines.append([(" ", _BOLD), ("Usage: ", _USAGE), (toplevel.USAGE, _BOLD)]
                 + ([(" " * (width - 2 - len(usage)), _BOLD)] if len(usage) < width - 2 else []) + [(" ", _BOLD)])
    lines.append([(" " * width, _BOLD)])
    lines.extend([(f" {line} ", "")] for line in help_lines)
    lines.append([(" " * width, "")])
    lines.extend(_panel("Options", options, width))
    lines.extend(_panel("Commands", commands, width))
    if colour:
        return "".join("".join(f"\x1b[{sgr}m{text}\x1b[0m" if sgr else text for text, sgr in line) + "\n"
                       for line in lines)
    return "".join("".join(text for text, _ in line) + "\n" for line in lines)


def _width(environ: Mapping[str, str]) -> int:
    """The width rich's Console finds: $COLUMNS, or else the first of stdin, stdout, stderr that is a terminal."""
    columns, lines = environ.get("COLUMNS"), environ.get("LINES")
    if columns is not None and columns.isdigit() and lines is not None and lines.isdigit():
        return int(columns)  # rich takes both as given (0 included)
    width = None
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd).columns
            break
        except (AttributeError, ValueError, OSError):
            pass
    columns = environ.get("COLUMNS")
    if columns is not None and columns.isdigit():
        width = int(columns)
    return width or 80


def for_stdout(environ: Mapping[str, str] = os.environ, stdout: TextIO = sys.stdout) -> Optional[str]:
    """The help for this process's standard output, or None where typer should print it."""
    if os.name != "posix" or os.path.basename(sys.argv[0]) != toplevel.PROGRAM:
        return None
    if any(name in environ for name in _ENVIRONMENT):
        return None
    if not (getattr(stdout, "encoding", None) or "").lower().startswith("utf"):
        return None
    try:
        terminal = stdout.isatty()
    except ValueError:
        return None
    if terminal and environ.get("TERM", "").lower() in ("dumb", "unknown"):
        return None
    return render(_width(environ), colour=terminal)
