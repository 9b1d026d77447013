"""The Node CLI 0.13's command lines, rewritten to tt's before anything parses them. Stdlib only (it runs on
every `tt` start, before the fast help path).

- `tt --json COMMAND ...`: a `--json` anywhere before `--` moves to the end of the line (every tt command takes
  it), so `tt --json pipeline plan` is `tt pipeline plan --json`;
- `tt -V` is `tt --version`;
- `tt local ...` (Node's hidden alias) is `tt ...`;
- `tt models serve ...` is `tt serve ...`;
- a bare `tt runs` / `tt models` (options alone after it, `--help` aside) lists: `tt runs list`, `tt models list`.
docs/migrating.md lists each; tests/host/cli/test_node_files.py runs Node's README lines through them.
"""

from __future__ import annotations

LISTING_GROUPS = ("runs", "models")
HELP = ("--help", "-h")


def rewrite(argv: list[str]) -> list[str]:
    """tt's command line for a Node one (any other line comes back unchanged)."""
    end = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:end], argv[end:]
    json_mode = "--json" in head
    head = [arg for arg in head if arg != "--json"]
    if head[:1] == ["local"]:
        head = head[1:]
    if head == ["-V"]:
        head = ["--version"]
    if head[:2] == ["models", "serve"]:
        head = ["serve", *head[2:]]
    if head[:1] and head[0] in LISTING_GROUPS and all(arg.startswith("-") and arg not in HELP for arg in head[1:]):
        head = [head[0], "list", *head[1:]]
    return head + (["--json"] if json_mode else []) + tail
