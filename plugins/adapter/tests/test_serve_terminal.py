"""`tt serve` of the real model on CPU (the LoRA run on SmolLM2-135M-Instruct, conftest `real_run`) shows no line
containing "Failed", "Error" or "Warning" when nothing failed: the host's server boundary
(tt_host.models.serve.run_process, shown by the CLI's own show_event, in the host's environment) keeps
known-harmless third-party lines (bitsandbytes' kernel fallback, transformers' FutureWarnings, progress bars) in the
server log, TT_HOME/logs/serve.log, and off the terminal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DRIVER = """
import json, os, sys
from pathlib import Path
from tt_host.cli.serve import show_event
from tt_host.models.serve import run_process
code, signalled, _ = run_process(json.loads(sys.argv[1]), dict(os.environ), Path(sys.argv[2]), show_event)
sys.exit(130 if signalled else code)
"""


def test_serving_the_real_model_shows_no_failed_error_or_warning_line(real_base, real_run, tmp_path):
    ready = tmp_path / "ready.json"
    request = {"model_path": str(real_base), "adapter_path": real_run.done["train"]["result"]["outputs"]["adapter"],
               "model_name": "real", "system_message": real_run.system, "host": "127.0.0.1", "port": 0,
               "max_concurrency": 2, "device": "cpu", "ready_file": str(ready)}
    (tmp_path / "serve-request.json").write_text(json.dumps(request))
    command = [sys.executable, "-m", "tt_engine_adapter.serve", str(tmp_path / "serve-request.json")]
    env = {**os.environ, "TT_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    env.pop("TT_SERVE_API_KEY", None)
    with open(tmp_path / "terminal.txt", "w") as terminal:
        host = subprocess.Popen([str(REPO / ".venv" / "bin" / "python"), "-c", DRIVER, json.dumps(command),
                                 str(tmp_path)], cwd=REPO, env=env, stdout=terminal, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 240
            while not ready.is_file():
                assert host.poll() is None and time.monotonic() < deadline, (tmp_path / "terminal.txt").read_text()
                time.sleep(0.5)
            url = json.loads(ready.read_text())["url"]
            body = json.dumps({"model": "real", "temperature": 0, "max_tokens": 8,
                               "messages": [{"role": "user", "content": "the film was great"}]}).encode()
            call = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(call, timeout=120) as answer:
                assert json.loads(answer.read())["choices"][0]["message"]["content"].strip()
        finally:
            host.send_signal(signal.SIGINT)
            code = host.wait(timeout=60)
    shown = (tmp_path / "terminal.txt").read_text()
    assert code == 130 and "serving real at" in shown, shown
    assert [line for line in shown.splitlines() if any(w in line for w in ("Failed", "Error", "Warning"))] == []
    log = (tmp_path / "home" / "logs" / "serve.log").read_text()
    assert "Started server process" in log and '"type": "ready"' in log, log
    noisy = [line for line in log.splitlines() if "%|" in line or "Failed to load CPU" in line or "Warning" in line]
    assert any("Loading weights" in line for line in noisy), log  # transformers' bar, on every machine
    print(f"terminal:\n{shown}\n{len(noisy)} third-party lines only in the server log: {noisy}")
