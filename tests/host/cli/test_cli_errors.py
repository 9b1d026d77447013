"""One handler maps every host error onto the command line (tt_host.cli.common.TTGroup): a TTError that
escapes a command prints `error: ...` (or, under that command's --json, the JSON error object) and exits
with the error's code. So that --json is honoured, every command's --json option is `json_option`'s."""

from __future__ import annotations

import json

from typer.main import get_command
from typer.testing import CliRunner

from tt_host.cli.common import _note_json
from tt_host.cli.main import app


def commands(group, prefix=()):
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from commands(command, prefix + (name,))
        else:
            yield prefix + (name,), command


def test_every_json_option_is_noted_for_the_error_handler():
    plain = [" ".join(path) for path, command in commands(get_command(app))
             for param in command.params if "--json" in getattr(param, "opts", ()) and getattr(param.callback, "__wrapped__", param.callback) is not _note_json]
    assert plain == [], f"--json without json_option(): {plain}"


def test_an_error_under_json_is_a_json_object_with_its_exit_code(tmp_path):
    runner = CliRunner()
    for argv in (["runs", "events", str(tmp_path / "nowhere"), "--json"], ["runs", "get", "nosuch", "--json"],
                 ["models", "activate", "nosuch", "--json"]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, (argv, result.output)
        body = json.loads(result.stdout)
        assert body["ok"] is False and body["error"]["message"], argv
        plain = runner.invoke(app, [a for a in argv if a != "--json"])
        assert plain.exit_code == 2 and plain.stderr.startswith("error: ") and plain.stdout == "", argv
