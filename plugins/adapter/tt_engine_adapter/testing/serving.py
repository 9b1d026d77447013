"""Start the real server (`python -m tt_engine_adapter.serve`) as a subprocess, for tests and benches.

`start(tmp, model_path, ...)` writes the request, launches the process, waits
for its `ready_file` (or its exit), and returns a `Server` with the URL; the
context manager stops it with SIGTERM and checks it exits.
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


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    log: Path

    def stop(self, timeout: float = 30) -> int:
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
          api_key: Optional[str] = None, timeout: float = 120, **settings: object) -> Server:
    """Start a server; `settings` are further request keys (allowed_hosts, default_max_tokens, header_timeout)."""
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
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "tt_engine_adapter.serve", str(tmp / "serve-request.json")],
                                   stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready.is_file():
            return Server(process, json.loads(ready.read_text())["url"], log)
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
