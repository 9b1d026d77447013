"""The host's warm stage servers (tt_host.engines.stageserver; docs/operations.md "Stage server"), real server
processes on this interpreter (tt_stagekit is installed here) with a stdlib warm module: one server per identity,
a crashed one replaced, a rebuilt environment (a new python file or link at the same path) never given an old
server, and a request for a module off the warm module's list refused as data."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tt_host.engines import stageserver
from tt_stagekit import stagewire

WARM = "tt_stagekit.contract"  # stdlib only; it lists no SERVED_STAGES: every stage module is refused


@pytest.fixture
def env(tmp_path):
    servers = dict(stageserver._SERVERS)
    stageserver._SERVERS.clear()
    yield {**os.environ, "PYTHONSAFEPATH": "1", "TT_STAGE_REQUEST": "/a/request.json"}
    for server in stageserver._SERVERS.values():
        server.close()
        server.process.wait(timeout=30)  # its control pair closed: it ends (no stages)
    stageserver._SERVERS.clear()
    stageserver._SERVERS.update(servers)


def python_link(root: Path) -> Path:
    """An environment at `root` whose python is this one's (a link, with this venv's pyvenv.cfg and lib)."""
    venv = Path(sys.prefix)
    (root / "bin").mkdir(parents=True, exist_ok=True)
    for name in ("pyvenv.cfg", "lib"):
        if not (root / name).exists():
            (root / name).symlink_to(venv / name)
    link = root / "bin" / "python"
    link.unlink(missing_ok=True)
    link.symlink_to(sys.executable)
    return link


def refused(conn) -> dict:
    """Ask the server behind `conn` for a module off its list: its answer (so it runs and reads requests)."""
    with conn, open(os.devnull, "rb") as null:
        request = {"module": "os", "argv": [], "env": {}, "cwd": "/", "umask": 0o22, "fds": [0, 1, 2]}
        stagewire.send(conn, request, [null.fileno()] * 3)
        conn.settimeout(120)
        answer, fds = stagewire.receive(conn)
    assert fds == []
    return answer


def server_for(python: Path, env: dict, tmp_path: Path) -> int:
    conn = stageserver.connect(python, WARM, env, tmp_path / "stage-server.log")
    assert conn is not None
    assert "refused" in refused(conn), (tmp_path / "stage-server.log").read_text()
    return stageserver._SERVERS[stageserver.identity(python, WARM, env)].process.pid


def test_one_server_per_identity_and_a_crashed_one_is_replaced(env, tmp_path):
    python = python_link(tmp_path / "env-a")
    first = server_for(python, env, tmp_path)
    assert server_for(python, {**env, "TT_STAGE_REQUEST": "/b/request.json", "TT_HOST_PID": "1"}, tmp_path) == first
    other = server_for(python, {**env, "OMP_NUM_THREADS": "3"}, tmp_path)  # read at import: a server of its own
    assert other != first and len(stageserver._SERVERS) == 2
    (crashed,) = [s for s in stageserver._SERVERS.values() if s.process.pid == first]
    os.kill(first, signal.SIGKILL)
    crashed.process.wait(timeout=30)
    replaced = server_for(python, env, tmp_path)
    assert replaced != first


def test_a_rebuilt_environment_never_gets_an_old_server(env, tmp_path):
    python = python_link(tmp_path / "env-b")
    old = server_for(python, env, tmp_path)
    python_link(tmp_path / "env-b")  # the environment rebuilt: a new link at the same path
    new = server_for(python, env, tmp_path)
    assert new != old
    assert server_for(python_link(tmp_path / "env-c"), env, tmp_path) not in (old, new)


def test_a_module_off_the_list_is_refused_as_data(env, tmp_path):
    conn = stageserver.connect(python_link(tmp_path / "env-d"), WARM, env, tmp_path / "stage-server.log")
    assert conn is not None
    assert refused(conn) == {"refused": "stage module 'os' is not one this server runs"}
