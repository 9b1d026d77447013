"""A module planted in the folder `tt` is started from never runs in a Python tt starts (every such start carries
-P or -I: tests/architecture/test_python_starts_isolated.py). Real processes: the validate-time regex grader
check (tt_host.spec.graders, a child `python -c`) and the server `tt chat` starts (tt_host.models.chat, a child
`python -c ... serve`) both `import json` first; a `json.py` in the current folder writes a marker if imported."""

from __future__ import annotations

from pathlib import Path

from conftest import echo_spec, write_spec

MARKER = "planted-module-ran.txt"


def plant(folder: Path) -> Path:
    (folder / "json.py").write_text(f"open({str(folder / MARKER)!r}, 'w').write('ran')\nraise SystemExit(97)\n")
    return folder / MARKER


def test_a_planted_json_py_never_runs_on_validate_with_a_regex_grader(tt, tmp_path):
    marker = plant(tt.cwd)
    spec = echo_spec()
    spec["evaluation"] = {"graders": [{"kind": "regex", "pattern": r"City \d+"}]}
    path = write_spec(tmp_path / "s", spec)
    code, out = tt.json("validate", path)
    assert code == 0 and out["valid"], out
    assert not marker.exists()


def test_a_planted_json_py_never_runs_when_tt_chat_starts_its_server(tt, tmp_path):
    marker = plant(tt.cwd)
    proc = tt("chat", "no-such-model")  # the server child starts, finds no such model and stops: exit 2
    assert not marker.exists(), proc.stderr
    assert proc.returncode == 2 and "no-such-model" in proc.stderr, (proc.returncode, proc.stderr)
