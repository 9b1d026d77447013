"""Stage start: a plain `python -P -m <stage>` against the same stage forked by the warm stage server
(TT_STAGE_SERVER=1, docs/operations.md "Stage server"), on the adapter engine with the real base.

One `tt run` (plain) of a small spec on the real base (scripts/real-base) writes each stage's request.json;
then the `baseline` stage (held-out generation: one prompt, one new token) and the `train` stage (its first
optimizer step) are run again through the host's own `tt_host.engines.runner.run_stage`, plain and served
in turn (A B A B ...), from that run's requests. Measured: seconds from the call (the request is written;
the stage process starts) to the stage's first progress event (after its first model forward: one generated
token, or one optimizer step), and to its end. The served runs' first call starts the server (its import is
reported apart); the repeats after it find it warm.

Run: .venv/bin/python bench/stage_start.py [--repeats 3] [--base DIR] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tt(home: Path, *args: str) -> dict:
    env = {**os.environ, "TT_HOME": str(home / "tt-home"), "HF_HUB_OFFLINE": "1"}
    env.pop("TT_STAGE_SERVER", None)
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "tt"), *args, "--json"], env=env, cwd=home,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"tt {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def spec(base: str) -> dict:
    examples = [{"input": f"Capital of country {i}?", "output": f"City {i}"} for i in range(8)]
    return {"name": "stage-start", "engine": "adapter", "system_prompt": "Answer with the capital city.",
            "base_model": base, "examples": examples,
            "hyperparameters": {"n_epochs": 1, "batch_size": 4, "max_seq_length": 64, "max_new_tokens": 1,
                                "max_eval_examples": 1, "eval_batch_size": 1, "seed": 7, "lora_rank": 4}}


def one(python: Path, module: str, run: Path, stage: str, served: bool) -> dict:
    """Run the stage once through run_stage; seconds to its first progress event and to its end."""
    from tt_host.engines import runner

    os.environ["TT_STAGE_SERVER"] = "1" if served else "0"
    first: list[float] = []
    started = time.monotonic()

    def on_event(event: dict) -> None:
        if event.get("type") == "progress" and not first:
            first.append(time.monotonic() - started)

    log = run / "logs" / f"bench-{stage}.log"
    outcome = runner.run_stage(python, module, run / stage / "request.json", run, log, on_event,
                               warm="tt_engine_adapter.stages.warm")
    if outcome.exit_code != 0:
        raise SystemExit(f"{stage} exited {outcome.exit_code}: {outcome.last_error}; see {log}")
    return {"first": first[0] if first else None, "end": outcome.seconds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base", default=None, help="a Hugging Face folder (default: scripts/real-base)")
    parser.add_argument("--work", default=None, help="a folder to work in (default: a temporary one)")
    args = parser.parse_args()
    base = args.base or subprocess.run([str(REPO / "scripts" / "real-base")], capture_output=True, text=True,
                                       check=True).stdout.strip()
    sys.path.insert(0, str(REPO))
    work = Path(args.work or tempfile.mkdtemp(prefix="tt-stage-start-"))
    (work / "s").mkdir(parents=True, exist_ok=True)
    (work / "s" / "tunedtensor.json").write_text(json.dumps(spec(base)))
    python = Path(tt(work, "engines", "prepare", "adapter")["python"])
    run = work / "run"
    if not (run / "train" / "result.json").exists():
        tt(work, "run", str(work / "s" / "tunedtensor.json"), "--resume", str(run))
    from tt_host.engines import stageserver

    results: dict[tuple[str, bool], list[dict]] = {}
    server_start = None
    for stage, module in (("baseline", "tt_engine_adapter.stages.evaluate"), ("train", "tt_engine_adapter.stages.train")):
        for repeat in range(args.repeats + 1):
            for served in (False, True):
                if repeat == 0 and not served:
                    continue  # the warm-up round only starts the server
                figures = one(python, module, run, stage, served)
                if repeat == 0:
                    server_start = server_start or figures
                    continue
                results.setdefault((stage, served), []).append(figures)
    print(f"load average before/after: {os.getloadavg()}")
    print(f"first served stage (starts the server, baseline): first forward {server_start['first']:.2f} s, "
          f"end {server_start['end']:.2f} s; servers: {stageserver.server_pids()}")
    print(f"{'stage':10} {'path':7} " + " ".join(f"{'#' + str(i + 1):>15}" for i in range(args.repeats))
          + "   (seconds to first forward / to the end)")
    for (stage, served), rows in results.items():
        cells = " ".join(f"{r['first']:6.2f} /{r['end']:6.2f}" for r in rows)
        print(f"{stage:10} {'served' if served else 'plain':7} {cells}")


if __name__ == "__main__":
    main()
