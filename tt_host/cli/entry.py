"""The `tt` console script: `tt`, `tt --help` and `tt --version` answered before typer is imported.

Everything else, and these too where tt_host.cli.fasthelp cannot be sure to
print what typer prints, goes to the typer app in tt_host.cli.main, which
imports typer and rich (and, in the commands that need them, pydantic and the
plugins). Output and exit codes are typer's: the help on stdout, exit 0 for
`--help` (followed by an empty line, as click's help option prints it) and
exit 2 for a bare `tt` (typer's no_args_is_help). A Node CLI 0.13 command line is first rewritten to tt's
(tt_host.cli.nodeargs: stdlib only, so the fast paths stay fast).
"""

from __future__ import annotations

import sys


def _fast(argv: list[str]) -> int | None:
    """The exit code when this process answered `argv` itself, None when the typer app must."""
    if argv == ["--version"]:
        from tt_host import __version__

        sys.stdout.write(f"tt {__version__}\n")
        return 0
    if argv not in ([], ["--help"]):
        return None
    from tt_host.cli.fasthelp import for_stdout

    text = for_stdout()
    if text is None:
        return None
    sys.stdout.write(text + "\n" if argv else text)
    sys.stdout.flush()
    return 0 if argv else 2


def main() -> int | None:
    from tt_host.cli.nodeargs import rewrite

    sys.argv[1:] = rewrite(sys.argv[1:])  # Node 0.13's command lines (global --json, -V, `tt local`, ...)
    code = _fast(sys.argv[1:])
    if code is not None:
        return code
    from tt_host.cli.main import main as typer_main

    return typer_main()
