"""Start the real server (`python -m tt_engine_adapter.serve`) as a subprocess, for tests and benches.

`start(tmp, model_path, ...)` writes the request, launches the process, waits
for its `ready_file` (or its exit), and returns a `Server` with the URL; the
context manager stops it with SIGTERM and checks it exits. `gate=True` runs
it through `gated_serve`: `Server.gate` then holds the scheduler thread at
its next token pick while closed (a generation certainly running).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


class Gate:
    """The test gate of a server started with `gate=True` (see `gated_serve`)."""

    def __init__(self, path: Path):
        self.path, self.held_path = path, path.with_name(path.name + ".held")

    def close(self) -> None:
        """From now on the scheduler thread holds at its next token pick."""
        self.path.write_text("closed\n")

    def held(self, gone: int = 0, timeout: float = 60) -> dict:
        """Wait until the scheduler holds at the gate and sees at least `gone` clients gone; its state."""
        def state() -> Optional[dict]:
            try:
                value = json.loads(self.held_path.read_text())
            except (OSError, ValueError):
                return None
            return value if value["gone"] >= gone else None

        return wait_for(state, f"the server to hold at the gate with {gone} client(s) gone", timeout)

    def open(self, timeout: float = 60) -> None:
        """Let the scheduler thread go on; returns once it has left the gate (if it was held)."""
        self.path.unlink(missing_ok=True)
        wait_for(lambda: not self.held_path.exists(), "the server to leave the gate", timeout)


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    log: Path
    gate: Optional[Gate] = None

    def stop(self, timeout: float = 120) -> int:  # a graceful stop on a loaded 2-core machine took over 30 s
        if self.gate is not None:
            self.gate.path.unlink(missing_ok=True)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StartFailed(RuntimeError):
    def __init__(self, code: int, output: str):
        super().__init__(f"server exited {code}:\n{output}")
        self.code, self.output = code, output


def start(tmp: Path, model_path: str | Path, *, adapter_path: Optional[str | Path] = None, model_name: str = "tiny",
          system_message: Optional[str] = None, host: str = "127.0.0.1", port: int = 0, max_concurrency: int = 4,
          api_key: Optional[str] = None, timeout: float = 300, gate: bool = False, **settings: object) -> Server:
    """Start a server; `settings` are further request keys (allowed_hosts, default_max_tokens, header_timeout);
    `gate` runs it with a test gate (`Server.gate`, open at start)."""
    tmp = Path(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    ready = tmp / "ready.json"
    ready.unlink(missing_ok=True)
    request = {"model_path": str(model_path), "adapter_path": str(adapter_path) if adapter_path else None,
               "model_name": model_name, "system_message": system_message, "host": host, "port": port,
               "max_concurrency": max_concurrency, "device": "cpu", "ready_file": str(ready), **settings}
    (tmp / "serve-request.json").write_text(json.dumps(request))
    env = dict(os.environ, TT_SERVE_LOG_LEVEL="warning", TT_SERVE_GRACE_SECONDS="5")
    env.pop("TT_SERVE_API_KEY", None)
    if api_key:
        env["TT_SERVE_API_KEY"] = api_key
    log = tmp / "server.log"
    held = Gate(tmp / "gate") if gate else None
    command = [sys.executable, "-P", "-m", "tt_engine_adapter.serve"]
    if held is not None:
        held.path.unlink(missing_ok=True)
        command = [sys.executable, "-P", "-m", "tt_engine_adapter.testing.gated_serve", str(held.path)]
    with open(log, "wb") as out:
        process = subprocess.Popen(command + [str(tmp / "serve-request.json")], stdout=out, stderr=subprocess.STDOUT,
                                   env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready.is_file():
            return Server(process, json.loads(ready.read_text())["url"], log, held)
        if process.poll() is not None:
            raise StartFailed(process.returncode, log.read_text(errors="replace"))
        time.sleep(0.05)
    process.kill()
    raise TimeoutError(f"the server did not become ready in {timeout}s:\n{log.read_text(errors='replace')}")


def parse_metrics(text: str) -> dict[str, float]:
    """`/metrics` (Prometheus text) as {name: value}."""
    return {name: float(value) for name, value in (line.split() for line in text.splitlines()
                                                   if line and not line.startswith("#"))}


def metrics(url: str) -> dict[str, float]:
    import httpx

    return parse_metrics(httpx.get(f"{url}/metrics", timeout=30).text)


def wait_for(condition, what: str, timeout: float = 60):
    """Poll `condition` until it returns something true (returned), or fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
