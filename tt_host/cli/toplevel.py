"""What `tt --help` lists, as plain data, for the fast help path (tt_host.cli.fasthelp).

A copy of what the typer app in tt_host.cli.main declares: the root help, the
root options and each command's summary (the first paragraph of its help).
No plugin adds anything to the top-level help. tests/host/cli/test_fast_help.py renders
the real app with typer at many widths, in colour and plain, and compares: a
change to a command, its docstring or a sub-app's help fails it until this file
says the same.

Stdlib only, imports nothing: `tt --help` reads it before anything heavy loads.
"""

from __future__ import annotations

PROGRAM = "tt"
USAGE = "tt [OPTIONS] COMMAND [ARGS]..."
HELP = "tt: turn a behavior spec (tunedtensor.json) into a trained, evaluated model on your own hardware."

# (option, type shown, help), in the order typer lists them.
OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--version", "<bool>", "Show the version."),
    ("--help", "<bool>", "Show this message and exit."),
)

# (command, summary), in the order typer lists them; a newline in a summary is kept, as typer keeps it.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("validate", "Validate a spec and show the compiled system message. Exit 2 when invalid."),
    ("run", "Train, evaluate and report a spec with its engine."),
    ("doctor", "Check python, uv, disk, writable folders, plugins, and a spec's engine prerequisites.\n"
               "Exit 1 when a check fails; exit 2, checking nothing, when the spec file cannot be read as JSON."),
    ("init", "Write a starter tunedtensor.json with placeholders (`tt doctor` flags them)."),
    ("serve", "Serve MODEL at /v1/chat/completions (streaming too) and /v1/models until Ctrl-C."),
    ("chat", "Chat with MODEL line by line (the spec's system message applied, as `tt serve` applies it)."),
    ("info", "This tt: its version, where it keeps models, runs and environments, the Hugging Face cache, its engines."),
    ("status", "The project here: its spec, the local-runner.json applied, the active model, the latest run; creates "
               "nothing."),
    ("sweep", "Search settings on a selection split carved from the training examples; score the winner's held-out\n"
              "set once."),
    ("engines", "Installed engines and their environments."),
    ("runs", "Runs and their reports."),
    ("models", "Registered models: the verified artifacts runs produced."),
    ("pipeline", "Pipeline documents (tunedtensor.pipeline.json): init, validate, plan, run."),
    ("data", "Training data grown by a teacher model (the spec's synthesis block)."),
)
