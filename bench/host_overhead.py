"""Host overheads, as ratios against baselines measured in the same run.

1. Command start-up: `tt --help` (drawn by tt_host.cli.fasthelp, no typer), the same help drawn by the
   typer app, `tt validate` on the shipped foundation example, each against `python -c pass` run in
   turn with it (A B A B ...: the ratio is taken pair by pair, so it holds while the machine's speed
   drifts). Targets (issue 24): `tt --help` under 0.15 s, `tt validate SPEC` under 0.3 s.
2. What start-up imports cost: each import (or step) in a fresh interpreter, minus `python -c pass`
   in the same pair: rich's Console, typer, typer's help renderer, pydantic's BaseModel, the neutral
   spec models, pluggy plus the entry-point scan, loading every installed plugin, the typer app.
3. Environment-ready check per stage (`ensure_env` on a ready environment: hash the lockfiles,
   check the marker) in milliseconds.
4. Runner overhead per stage: a stage run through `tt_host.engines.runner.run_stage` versus the same
   `python -m <module> request.json` run directly with subprocess.

Each figure is a median; wall seconds and CPU seconds (user + system of the child, which a busy
machine inflates less than wall time) both. Start-up figures depend on Python's bytecode cache:
with `PYTHONDONTWRITEBYTECODE` set and no `__pycache__` yet (a fresh `uv sync` writes none), every
run compiles every module; `--no-bytecode-cache` measures that case (an empty PYTHONPYCACHEPREFIX).

Run: .venv/bin/python bench/host_overhead.py [--repeats N] [--startup-only] [--no-bytecode-cache]
(the stage part uses the echo test engine; builds its env once)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from plugin_site import echo_site  # noqa: E402

SPEC = REPO / "examples" / "foundation" / "tunedtensor.json"
# (label, python -c source): each measured in a fresh interpreter, minus `python -c pass`
IMPORTS = (
    ("rich Console", "import rich.console"),
    ("typer", "import typer"),
    ("typer + its rich help renderer", "import typer, typer.rich_utils"),
    ("pydantic BaseModel", "from pydantic import BaseModel"),
    ("neutral spec models", "import tt_host.spec.schema"),
    ("pluggy + entry-point scan", "import pluggy; from importlib import metadata; metadata.entry_points(group='tt')"),
    ("every plugin loaded", "from tt_host.plugins import plugins; plugins()"),
    ("the typer app (tt_host.cli.main)", "import tt_host.cli.main"),
)
TYPER_APP = "import sys; from tt_host.cli.main import main; sys.argv[0] = 'tt'; main()"


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _once(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `command` (its output thrown away; any exit code)."""
    cpu, start = _child_cpu(), time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    return time.perf_counter() - start, _child_cpu() - cpu


def paired(command: list[str], baseline: list[str], env: dict[str, str], repeat: int) -> dict[str, float]:
    """Medians of `command` and `baseline` run in turn (one warm-up each), and of their pairwise ratios
    and differences."""
    _once(command, env), _once(baseline, env)
    runs = [(_once(command, env), _once(baseline, env)) for _ in range(repeat)]
    figures = {}
    for index, kind in enumerate(("wall", "cpu")):
        a, b = [run[0][index] for run in runs], [run[1][index] for run in runs]
        figures[kind] = statistics.median(a)
        figures[f"base_{kind}"] = statistics.median(b)
        figures[f"ratio_{kind}"] = statistics.median(x / y for x, y in zip(a, b))
        figures[f"extra_{kind}"] = statistics.median(x - y for x, y in zip(a, b))
    return figures


def startup(repeat: int, no_cache: bool) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if no_cache:
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="tt-bench-nocache-"))
    python, tt = sys.executable, str(Path(sys.executable).parent / "tt")
    base = [python, "-c", "pass"]
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {repeat} pairs each; "
          f"bytecode cache {'off (every module compiled)' if no_cache else 'on'}")
    print(f"{'command (A), against python -c pass (B)':44} {'A wall':>9} {'B wall':>8} {'A/B':>6}"
          f" {'A cpu':>9} {'B cpu':>8} {'A/B':>6}")
    commands = (("tt --help", [tt, "--help"]),
                ("tt --help, drawn by the typer app", [python, "-c", TYPER_APP, "--help"]),
                (f"tt validate {SPEC.relative_to(REPO)}", [tt, "validate", str(SPEC)]))
    for label, command in commands:
        f = paired(command, base, env, repeat)
        print(f"{label:44} {f['wall'] * 1000:7.1f}ms {f['base_wall'] * 1000:6.1f}ms {f['ratio_wall']:5.1f}x"
              f" {f['cpu'] * 1000:7.1f}ms {f['base_cpu'] * 1000:6.1f}ms {f['ratio_cpu']:5.1f}x")
    print(f"\n{'import (fresh interpreter), minus python -c pass':48} {'+wall':>9} {'+cpu':>9}")
    for label, source in IMPORTS:
        f = paired([python, "-c", source], base, env, repeat)
        print(f"{label:48} {f['extra_wall'] * 1000:7.1f}ms {f['extra_cpu'] * 1000:7.1f}ms")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def stages() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tt-bench-"))
    os.environ["PYTHONPATH"] = os.pathsep.join(echo_site(tmp / "site"))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10, help="pairs per start-up figure (default 10)")
    parser.add_argument("--startup-only", action="store_true", help="skip the stage figures (3 and 4)")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="start-up with every module compiled from source, as without __pycache__")
    args = parser.parse_args()
    startup(args.repeats, args.no_bytecode_cache)
    if not args.startup_only:
        print()
        stages()


if __name__ == "__main__":
    main()
