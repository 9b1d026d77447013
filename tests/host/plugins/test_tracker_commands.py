"""The README's tracker commands (README "Everyday commands", docs/plugins.md "Trackers") on a real run: one
`TT_OBSERVERS=tensorboard,mlflow,wandb tt run` writes where those commands look, and the `tensorboard --logdir`
line serves the run's curves. (`mlflow ui` is the full mlflow package, fetched by uvx, which this suite does not
download: its store is checked with mlflow's own client instead; plugins.md records the UI checked by hand.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from conftest import REPO, echo_spec, write_spec
from process_support import wait_until
from tracker_support import mlflow_run


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return [line.split("#")[0].strip() for line in text.splitlines() if line.startswith(("TT_OBSERVERS=",
            "tensorboard ", "MLFLOW_ALLOW_FILE_STORE=", "wandb sync"))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scalar_tags(url: str):
    try:
        with urllib.request.urlopen(url + "/data/plugin/scalars/tags", timeout=5) as response:
            return json.loads(response.read())
    except OSError:
        return None


def test_the_readme_tracker_commands_find_the_run(tt, tmp_path):
    run_line, board, mlflow_ui, sync = readme_commands()
    assert run_line == "TT_OBSERVERS=tensorboard,mlflow,wandb tt run tunedtensor.json"
    assert mlflow_ui == "MLFLOW_ALLOW_FILE_STORE=true uvx --from mlflow mlflow ui --backend-store-uri ./mlruns"
    write_spec(tmp_path, echo_spec(steps=3))
    env = {**tt.env, "TT_OBSERVERS": "tensorboard,mlflow,wandb"}
    env.pop("MLFLOW_TRACKING_URI", None), env.pop("WANDB_MODE", None)
    proc = subprocess.run([shutil.which("tt", path=str(Path(sys.executable).parent)), "run", "tunedtensor.json"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    run = next((tmp_path / ".tuned-tensor" / "runs").iterdir())
    logdir = board.split("--logdir ", 1)[1].replace("<run-id>", run.name)
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "tensorboard"), "--logdir", logdir, "--host",
                               "127.0.0.1", "--port", str(port)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        tags = wait_until(lambda: scalar_tags(f"http://127.0.0.1:{port}"), "tensorboard to serve the run")
        assert "train/loss" in tags["."] and "scores/candidate.exact_match" in tags["."], tags
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    store = mlflow_ui.split("--backend-store-uri ", 1)[1]
    _, mlrun = mlflow_run((tmp_path / store).resolve().as_uri(), "capitals")
    assert mlrun.data.params["tt_run_id"] == run.name
    offline = sync.split("wandb sync ", 1)[1].replace("<run-id>", run.name)
    assert list(tmp_path.glob(offline)), offline
