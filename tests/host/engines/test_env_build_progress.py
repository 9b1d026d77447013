"""An engine environment build shows its progress (packages and bytes, read from uv's own output:
tt_host.engines.build_progress) and is quiet under --json; the build records which torch it holds (cpu or cuda,
its wheel's size from the lock, the GPU libraries' size: tt_host.engines.torch_build) in its marker, which
`tt engines prepare|list` show.

The progress tests build the echo test engine's environment with an empty uv cache, so uv really downloads
(pydantic-core, about 2 MB, from PyPI), once through pipes and once on a real pseudo-terminal; the torch record is read from environment folders laid out as uv lays
them (dist-info folders, library files) against the foundation engine's real locks.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from conftest import TT_BIN
from plugin_site import add_distribution, copy_echo

from tt_host.engines.envs import MARKER
from tt_host.engines.torch_build import describe_torch, summary

REPO = Path(__file__).resolve().parents[3]
FOUNDATION = REPO / "plugins" / "foundation"


def echo_copy(tmp_path: Path, tt) -> None:
    """A private copy of the echo engine, built into a private environments folder from an empty uv cache."""
    source = copy_echo(tmp_path / "engines")
    site = add_distribution(tmp_path / "site-copy", "tt-engine-echo", "0.1.0", {"echo": "tt_engine_echo.plugin"})
    tt.env.update(PYTHONPATH=os.pathsep.join([str(site), str(source)]), TT_ENVS_DIR=str(tmp_path / "envs"),
                  UV_CACHE_DIR=str(tmp_path / "uv-cache"))


def test_prepare_shows_packages_and_bytes_as_uv_fetches_them_and_json_stays_quiet(tt, tmp_path):
    echo_copy(tmp_path / "a", tt)
    proc = tt("engines", "prepare", "echo")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "preparing the echo environment", lines
    assert any(line.startswith("downloading pydantic-core (") and line.endswith(" MB)") for line in lines), lines
    arrived = [line for line in lines if line.startswith("downloaded pydantic-core · ")]
    assert arrived and " large packages, " in arrived[0] and " MB downloaded" in arrived[0], lines
    assert any(line.startswith("resolved ") for line in lines) and lines[-1].startswith("installed "), lines
    assert proc.stdout.strip().endswith("; no torch"), proc.stdout  # the echo engine has no torch
    env = next(p for p in (tmp_path / "a" / "envs").iterdir() if p.is_dir())
    marker = json.loads((env / MARKER).read_text())
    assert "torch" in marker and marker["torch"] is None, marker  # recorded at build time

    echo_copy(tmp_path / "b", tt)  # again from an empty cache, under --json: nothing but the JSON object
    proc = tt("engines", "prepare", "echo", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    out = json.loads(proc.stdout)
    assert out["built"] is True and out["torch"] is None, out
    code, listing = tt.json("engines", "list")
    assert code == 0 and next(e for e in listing["engines"] if e["name"] == "echo")["torch"] is None


def fake_env(root: Path, torch_version: str, gpu_bytes: int = 0) -> Path:
    """An environment folder as uv lays it out: dist-info folders, and the GPU libraries' files when given."""
    site = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / f"torch-{torch_version}.dist-info").mkdir(parents=True)
    if gpu_bytes:
        (site / "nvidia_cublas-13.1.1.3.dist-info").mkdir()
        (site / "nvidia" / "cublas" / "lib").mkdir(parents=True)
        (site / "nvidia" / "cublas" / "lib" / "libcublas.so.13").write_bytes(b"\0" * gpu_bytes)
        (site / "triton").mkdir()
        (site / "triton" / "libtriton.so").write_bytes(b"\0" * 10)
    return root


def test_the_torch_build_and_its_wheel_size_are_read_from_the_environment_and_its_lock(tmp_path):
    cuda = describe_torch(fake_env(tmp_path / "cuda", "2.13.0", gpu_bytes=4096), FOUNDATION / "uv.lock")
    assert cuda["version"] == "2.13.0" and cuda["build"] == "cuda" and cuda["gpu_libraries_bytes"] == 4106, cuda
    if sys.platform == "linux" and sys.version_info[:2] == (3, 11) and os.uname().machine == "x86_64":
        # PyPI's Linux x86-64 torch 2.13.0 for CPython 3.11, as the lock names it (the CUDA build)
        assert cuda["wheel"] == "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", cuda
        assert cuda["wheel_bytes"] == 526574961, cuda
        shipped = describe_torch(tmp_path / "cuda", FOUNDATION / "tt_engine_foundation" / "pylock.runtime.toml")
        assert shipped == cuda, shipped  # a wheel's shipped lock (PEP 751) names the same wheel
    assert summary(cuda).startswith("torch 2.13.0, cuda build (wheel ") and "CUDA libraries and triton" in summary(cuda)

    cpu = describe_torch(fake_env(tmp_path / "cpu", "2.13.0+cpu"), FOUNDATION / "uv.lock")
    assert cpu["build"] == "cpu" and cpu["gpu_libraries_bytes"] == 0 and cpu["wheel"] is None, cpu  # not in this lock
    assert describe_torch(tmp_path / "empty") is None
    assert describe_torch(fake_env(tmp_path / "rocm", "2.13.0+rocm6.4"))["build"] == "rocm"


def read_pty(tt, *args: str) -> tuple[int, str]:
    """`tt ARGS` with stdout and stderr on a real pseudo-terminal (160 columns); its exit status and what it
    drew, escape sequences removed."""
    from pty_gaps import on_terminal

    drawn = on_terminal([TT_BIN, *args], tt.env, tt.cwd, timeout=300)
    return drawn.code, drawn.text


def test_on_a_terminal_the_build_is_one_status_line_with_packages_and_bytes(tt, tmp_path):
    echo_copy(tmp_path, tt)
    code, drawn = read_pty(tt, "engines", "prepare", "echo")
    assert code == 0, drawn
    status = [line for line in drawn.splitlines() if "preparing the echo environment: " in line]
    assert any(" large packages, " in line and " MB downloaded" in line for line in status), drawn
    assert not any(line.startswith("downloading pydantic-core") for line in drawn.splitlines()), drawn  # no log lines
    assert "echo: environment built at " in drawn and "; no torch" in drawn, drawn


def test_under_json_a_terminal_on_stderr_still_sees_the_build_and_no_silence_over_5_s(tt, tmp_path):
    """`tt engines prepare echo --json` from an empty uv cache, stderr on a pseudo-terminal, stdout piped: the
    status line on stderr (redrawn every second, the seconds counting) while uv resolves, downloads and installs;
    stdout holds the JSON object alone. The longest stretch with nothing drawn is measured, not a speed."""
    from pty_gaps import on_terminal

    echo_copy(tmp_path, tt)
    drawn = on_terminal([TT_BIN, "engines", "prepare", "echo", "--json"], tt.env, tt.cwd, stdout_pipe=True)
    assert drawn.code == 0, drawn.text
    assert json.loads(drawn.stdout)["built"] is True, drawn.stdout
    assert "preparing the echo environment" in drawn.text, drawn.text
    assert drawn.longest_gap <= 5.0, (drawn.longest_gap, drawn.times, drawn.text)
