"""Export, serving and model lookup come from the Engine record: the echo test engine declares its model kinds, an
export module and a minimal OpenAI-compatible server in its plugin (tests/engines/echo); `tt models export` and
`tt serve` work for it with no echo code in tt_host (that tt_host names no shipped engine:
tests/architecture/test_engine_neutral_host.py).
"""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path

from conftest import echo_spec, write_spec


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_echo_engine_is_exported_and_served_from_its_record_alone(tt, tmp_path):
    spec = write_spec(tmp_path / "project", echo_spec(steps=2))
    code, out = tt.json("run", str(spec))
    assert code == 0, out
    run_dir = Path(out["run_dir"])

    code, exported = tt.json("models", "export", str(run_dir), str(tmp_path / "out"))
    assert code == 0, exported
    assert exported["kind"] == "echo-export"
    assert exported["files"] == ["artifact-manifest.json", "table.json", "tt-export.json"]
    table = json.loads((tmp_path / "out" / "table.json").read_text())
    assert table == json.loads((run_dir / "train" / "model" / "table.json").read_text()) and table
    prompt, reply = sorted(table.items())[0]
    code, again = tt.json("models", "export", str(run_dir), str(tmp_path / "out"))
    assert code == 2 and "already exists" in again["error"]["message"]
    code, merged = tt.json("models", "export", str(run_dir), str(tmp_path / "merged"), "--merged")
    assert code == 2 and "--merged" in merged["error"]["message"] and not (tmp_path / "merged").exists()

    process = tt.popen("serve", str(run_dir), "--port", "0", "--json")
    try:
        ready = None
        assert process.stdout is not None
        for line in process.stdout:
            event = json.loads(line)
            if event.get("type") == "ready":
                ready = event
                break
        assert ready is not None, f"tt serve did not become ready (exit {process.wait()}): {process.stderr.read()}"
        with urllib.request.urlopen(f"{ready['url']}/v1/models", timeout=30) as response:
            assert json.loads(response.read())["data"][0]["id"] == ready["model"]
        answer = _post(f"{ready['url']}/v1/chat/completions",
                       {"model": ready["model"], "messages": [{"role": "user", "content": prompt}]})
        assert answer["object"] == "chat.completion"
        assert answer["choices"][0]["message"] == {"role": "assistant", "content": reply}
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    assert code == 130


def test_a_long_export_on_a_terminal_counts_its_seconds_and_is_never_silent_over_5_s(tt, tmp_path):
    """`tt models export` of an echo run whose export works 7 s (TT_ECHO_EXPORT_SECONDS), stderr on a
    pseudo-terminal: the status line `exporting ID as hf · N s` is redrawn while the engine works, so the longest
    stretch with nothing drawn stays under 5 s (measured, not a speed); under --json stdout keeps the JSON."""
    from conftest import TT_BIN
    from pty_gaps import on_terminal

    spec = write_spec(tmp_path / "project", echo_spec(steps=2))
    code, out = tt.json("run", str(spec))
    assert code == 0, out
    env = {**tt.env, "TT_ECHO_EXPORT_SECONDS": "7"}
    drawn = on_terminal([TT_BIN, "models", "export", out["run_dir"], str(tmp_path / "out")], env, tt.cwd)
    assert drawn.code == 0 and "exported " in drawn.text, drawn.text
    assert drawn.longest_gap <= 5.0, (drawn.longest_gap, drawn.times, drawn.text)
    assert re.search(r"exporting \S+ as hf · [4-9] s", drawn.text), drawn.text
    drawn = on_terminal([TT_BIN, "models", "export", out["run_dir"], str(tmp_path / "out2"), "--json"], env, tt.cwd,
                        stdout_pipe=True)
    assert drawn.code == 0 and json.loads(drawn.stdout)["kind"] == "echo-export", drawn.stdout
    assert drawn.longest_gap <= 5.0, (drawn.longest_gap, drawn.times, drawn.text)
