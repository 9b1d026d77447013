"""The host knows no engine by name: export, serving and model lookup come from the Engine record.

The echo test engine declares its model kinds, an export module and a minimal OpenAI-compatible server in
its plugin (tests/engines/echo); `tt models export` and `tt serve` work for it with no echo code in tt_host.
"""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path

from conftest import echo_spec, write_spec

HOST = Path(__file__).resolve().parents[2] / "tt_host"
SHIPPED = re.compile(r"\b(foundation|adapter)s?\b|tt_engine_(foundation|adapter)|tt-engine-(foundation|adapter)", re.I)
# The one place tt_host may name a shipped engine: the engine a spec without `engine` is for. (A pipeline document's
# runtime keyword is the one an engine declares in its record, `PipelineVocabulary.runtime`.)
ALLOWED = {("spec/schema.py", 'DEFAULT_ENGINE = "adapter"')}


def test_tt_host_source_names_no_shipped_engine():
    found = []
    for path in sorted(HOST.rglob("*")):
        if not path.is_file() or path.suffix == ".pyc":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SHIPPED.search(line) and (path.relative_to(HOST).as_posix(), line.strip()) not in ALLOWED:
                found.append(f"tt_host/{path.relative_to(HOST).as_posix()}:{number}: {line.strip()}")
    assert not found, "tt_host names a shipped engine (declare it in the Engine record instead):\n" + "\n".join(found)


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
    assert code == 2 and "already exists" in again["error"]
    code, merged = tt.json("models", "export", str(run_dir), str(tmp_path / "merged"), "--merged")
    assert code == 2 and "--merged" in merged["error"] and not (tmp_path / "merged").exists()

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
