"""Host overheads, as ratios against baselines measured in the same run.

1. `tt --help` wall time versus `python -c pass` (interpreter start) — target: well under a second.
2. Environment-ready check per stage (`ensure_env` on a ready environment: hash the lockfiles,
   check the marker) in milliseconds.
3. Runner overhead per stage: a stage run through `tt_host.engines.runner.run_stage` versus the same
   `python -m <module> request.json` run directly with subprocess.

Run: .venv/bin/python bench/host_overhead.py   (uses the echo test engine; builds its env once)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from plugin_site import echo_site  # noqa: E402


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tt-bench-"))
    os.environ["PYTHONPATH"] = os.pathsep.join(echo_site(tmp / "site"))
    tt = str(Path(sys.executable).parent / "tt")
    baseline = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 10)
    help_time = timed(lambda: subprocess.run([tt, "--help"], check=True, capture_output=True), 10)
    print(f"python -c pass      {baseline * 1000:7.1f} ms")
    print(f"tt --help           {help_time * 1000:7.1f} ms  ({help_time / baseline:.2f}x interpreter start)")

    sys.path[:0] = os.environ["PYTHONPATH"].split(os.pathsep)
    from tt_host.engines import envs
    from tt_host.plugins import load_plugins
    from tt_host.engines.runner import run_stage

    engine = load_plugins().engine("echo")
    info = envs.ensure_env(engine)
    ready = timed(lambda: envs.ensure_env(engine), 50)
    print(f"env ready check     {ready * 1000:7.2f} ms per stage")

    stage_dir = tmp / "run" / "prepare"
    stage_dir.mkdir(parents=True)
    request = {"protocol": 1, "stage_dir": str(stage_dir), "result_path": str(stage_dir / "result.json"),
               "train_rows": [], "resume": False, "spec": {"echo": {"reject_input": False}}}
    request_path = stage_dir / "request.json"
    request_path.write_text(json.dumps(request))
    module = "tt_engine_echo.stages.prepare"
    direct = timed(lambda: subprocess.run([str(info.python), "-m", module, str(request_path)], check=True,
                                          capture_output=True), 10)
    via_runner = timed(lambda: run_stage(info.python, module, request_path, tmp / "run", tmp / "run" / "log",
                                         lambda event: None), 10)
    print(f"stage, direct       {direct * 1000:7.1f} ms")
    print(f"stage, via runner   {via_runner * 1000:7.1f} ms  ({via_runner / direct:.2f}x direct, "
          f"+{(via_runner - direct) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
