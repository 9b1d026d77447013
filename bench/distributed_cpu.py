"""Distributed training on this CPU: 1 versus 2 processes (torchrun + DDP, gloo), and the launch overhead.

1. Foundation pretraining through the real `tt run` (host venv, engine env) at the same global batch:
   1 process × 1 thread, 1 process × 2 threads (the same cores as 2 ranks), 2 processes × 1 thread.
   Figures: `pretrain.tokens_per_second` from the report (compute of steps 2.., as the engine times
   it) and the pretrain stage's wall time from run.json (start-up, checkpoints and model writing
   included); the final loss of each, which must agree.
2. Launch overhead: a script that imports torch, joins a gloo process group and does one
   all-reduce, started by the engine's torchrun launcher with 2 ranks, versus the same script with
   `python` alone (torch import only), best of 3.

Run: .venv/bin/python bench/distributed_cpu.py   (prints one RESULT line of JSON at the end)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "e2e"), str(REPO / "tests")]  # foundation_support imports tests/process_support
from foundation_support import TT_BIN, tiny_spec, tt_env  # noqa: E402

SETTINGS = dict(depth=4, sequence_length=128, batch_size=8, gradient_accumulation_steps=2, pretrain_steps=30,
                warmup_steps=3, checkpoint_interval_steps=0, finetune_steps=0, log_interval_steps=5, vocab_size=512)

SCRIPT = """
import os, sys, torch
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    import torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1); dist.all_reduce(t); dist.destroy_process_group()
"""


def pretrain(tmp: Path, name: str, nproc: int, threads: int) -> dict:
    spec = tiny_spec(tmp / name, nproc_per_node=nproc, **SETTINGS)
    env = tt_env(tmp)
    env["TT_NUM_THREADS"] = str(threads)
    run_dir = tmp / f"{name}-run"
    proc = subprocess.run([TT_BIN, "run", str(spec), "--resume", str(run_dir)], env=env, cwd=tmp,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
    report = json.loads((run_dir / "report.json").read_text())["metrics"]
    stage = json.loads((run_dir / "run.json").read_text())["stages"]["pretrain"]
    return {"processes": nproc, "threads_per_process": threads,
            "tokens_per_second": round(report["pretrain.tokens_per_second"], 1),
            "stage_seconds": stage["seconds"], "final_loss": round(report["pretrain.final_loss"], 6)}


def engine_python(tmp: Path) -> str:
    out = subprocess.run([TT_BIN, "engines", "prepare", "foundation", "--json"], env=tt_env(tmp),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["python"]


def best_of(cmd: list[str], env: dict, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tt-bench-ddp-"))
    python = engine_python(tmp)
    script = tmp / "join.py"
    script.write_text(SCRIPT)
    env = dict(tt_env(tmp), OMP_NUM_THREADS="1")
    plain = best_of([python, str(script)], env)
    launched = best_of([python, "-m", "tt_stagekit.launcher", "--standalone", "--nnodes", "1",
                        "--nproc_per_node", "2", str(script)], env)
    runs = [pretrain(tmp, "p1t1", 1, 1), pretrain(tmp, "p1t2", 1, 2), pretrain(tmp, "p2t1", 2, 1)]
    for row in runs:
        print(f"{row['processes']} process(es) x {row['threads_per_process']} thread(s): "
              f"{row['tokens_per_second']:.0f} tokens/s, pretrain stage {row['stage_seconds']:.1f}s, "
              f"final loss {row['final_loss']}")
    print(f"launch: python + import torch {plain:.2f}s; torchrun 2 ranks + gloo group + all-reduce {launched:.2f}s; "
          f"overhead {launched - plain:.2f}s")
    result = {"cpu_count": os.cpu_count(), "settings": SETTINGS, "runs": runs,
              "launch": {"python_import_torch_s": round(plain, 3), "torchrun_2_ranks_s": round(launched, 3),
                         "overhead_s": round(launched - plain, 3)},
              "speedup_2proc_vs_1proc_1thread": round(runs[2]["tokens_per_second"] / runs[0]["tokens_per_second"], 3),
              "speedup_2proc_vs_1proc_2threads": round(runs[2]["tokens_per_second"] / runs[1]["tokens_per_second"], 3)}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
