"""tt's foundation trainer beside nanochat on the same corpus: tokens/s and validation BPB, both protocols.

Fetches nothing. The corpus is the Python source of the interpreter running this script (its standard
library, `sys.base_prefix/lib/pythonX.Y`, files sorted by path, read as UTF-8, every 20th file by the
sha256 of its path held out), cut at --corpus-mb. Both trainers get the same files, depth, vocabulary,
sequence length and tokens per step.

- tt: the foundation engine's own stages (tokenizer, token_cache, pretrain, bpb) as subprocesses of the
  engine environment, one run per seed and per optimizer given (--tt-optimizers muon,adamw). The bpb
  stage reports both protocols: whole held-out text, and BOS-aligned document starts.
- nanochat (with --nanochat DIR --nanochat-python PY: a checkout and the interpreter of an environment it
  was installed into, bench-only): the corpus written as its parquet shards (last shard = validation),
  its tokenizer and base_train scripts at the same settings, its `Validation bpb` (document-start
  protocol) and tok/sec parsed from its log.

Equal tokens: --steps steps of --batch x --seq tokens, each --seeds seed. Equal wall clock: each side then
trains for as many steps as --wall-seconds buys at the tokens/s it measured (seed 0 only).

    plugins/foundation/.venv/bin/python -P bench/foundation_vs_nanochat.py --work /tmp/vs \\
        [--nanochat /path/to/nanochat --nanochat-python /path/to/nanochat-env/bin/python]

Prints a markdown table and writes <work>/results.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = "You are a helpful assistant."


def python_corpus(limit_chars: int) -> tuple[list[str], list[str], str]:
    """(training texts, held-out texts, description) from this interpreter's standard library."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    train, held, used = [], [], 0
    for path in sorted(lib.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip():
            continue
        key = hashlib.sha256(str(path.relative_to(lib)).encode()).digest()[0]
        (held if key % 20 == 0 else train).append(text)
        used += len(text)
        if used >= limit_chars:
            break
    return train, held, f"{lib} .py files, sorted, {used / 1e6:.1f} MB"


def write_jsonl(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")


def run_tt_stage(run: Path, stage: str, cfg: dict) -> dict:
    stage_dir = run / stage
    stage_dir.mkdir(parents=True, exist_ok=True)
    stages = {n: {"dir": str(run / n), "result": json.loads((run / n / "result.json").read_text())}
              for n in ("tokenizer", "token_cache", "pretrain") if n != stage and (run / n / "result.json").is_file()}
    request = {"protocol": 1, "engine": "foundation", "stage": stage, "run_dir": str(run), "stage_dir": str(stage_dir),
               "result_path": str(stage_dir / "result.json"),
               "spec": {"name": "vs", "engine": "foundation", "foundation": cfg}, "spec_dir": str(run.parent),
               "system_message": SYSTEM, "system_message_sha256": hashlib.sha256(SYSTEM.encode()).hexdigest(),
               "train_rows": [], "eval_prompts": [], "device": "cpu", "resume": False, "fingerprint": "bench",
               "stages": stages}
    (stage_dir / "request.json").write_text(json.dumps(request))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "plugins" / "foundation")}
    proc = subprocess.run([sys.executable, "-P", "-m", f"tt_engine_foundation.stages.{stage}", str(stage_dir / "request.json")],
                          capture_output=True, text=True, env=env, cwd=run)
    if proc.returncode != 0:
        raise SystemExit(f"tt stage {stage} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads((stage_dir / "result.json").read_text())


def tt_run(work: Path, base: Path, cfg: dict, name: str) -> dict:
    run = work / name
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(base, run)
    started = time.monotonic()
    pre = run_tt_stage(run, "pretrain", cfg)["metrics"]
    wall = time.monotonic() - started
    bpb = run_tt_stage(run, "bpb", cfg)["metrics"]
    return {"tokens_per_second": pre["pretrain.tokens_per_second"], "wall_seconds": wall,
            "tokens": pre["pretrain.tokens_seen"], "bpb_whole": bpb["bpb.value"], "bpb_doc_starts": bpb["bpb.document_starts"]}


def tt_side(args, work: Path, corpus: Path, held: Path) -> dict:
    base_cfg = {"corpus_path": str(corpus), "validation_path": str(held), "depth": args.depth, "vocab_size": args.vocab,
                "sequence_length": args.seq, "batch_size": args.batch, "pretrain_steps": args.steps,
                "tokenizer_max_chars": 10_000_000, "checkpoint_interval_steps": 0, "checkpoint_interval_seconds": 0,
                "log_interval_steps": 10, "finetune_steps": 0, "device": "cpu", "bpb_max_chars": 100_000_000}
    out = {}
    for optimizer in args.tt_optimizers.split(","):
        cfg = {**base_cfg, "optimizer": optimizer, "lr_schedule": "warmdown" if optimizer == "muon" else "cosine"}
        base = work / f"tt-{optimizer}-base"
        if not (base / "token_cache" / "result.json").is_file():
            base.mkdir(parents=True, exist_ok=True)
            run_tt_stage(base, "tokenizer", cfg)
            run_tt_stage(base, "token_cache", cfg)
        seeds = [tt_run(work, base, {**cfg, "seed": seed}, f"tt-{optimizer}-seed{seed}") for seed in range(args.seeds)]
        tps = seeds[0]["tokens_per_second"]
        steps = max(2, int(args.wall_seconds * tps / (args.batch * args.seq)))
        wall = tt_run(work, base, {**cfg, "seed": 0, "pretrain_steps": steps}, f"tt-{optimizer}-wall")
        out[f"tt ({optimizer})"] = {"seeds": seeds, "wall": wall, "wall_steps": steps}
    return out


def nanochat_run(args, work: Path, train: list[str], held: list[str]) -> dict:
    """nanochat's own scripts on the same texts; parquet shards written by its interpreter."""
    home = work / "nanochat-home"
    data = home / "base_data"
    data.mkdir(parents=True, exist_ok=True)
    texts = work / "nanochat-texts.json"
    texts.write_text(json.dumps({"train": train, "held": held}))
    writer = ("import json,sys,pyarrow as pa,pyarrow.parquet as pq\n"
              "d=json.load(open(sys.argv[1]));o=sys.argv[2]\n"
              "pq.write_table(pa.table({'text':d['train']}),o+'/shard_00000.parquet')\n"
              "pq.write_table(pa.table({'text':d['held']}),o+'/shard_00001.parquet')\n")
    subprocess.run([args.nanochat_python, "-c", writer, str(texts), str(data)], check=True)
    env = {**os.environ, "NANOCHAT_BASE_DIR": str(home), "OMP_NUM_THREADS": str(args.threads)}

    def script(*argv: str) -> str:
        proc = subprocess.run([args.nanochat_python, "-m", *argv], cwd=args.nanochat, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"nanochat {argv[0]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc.stdout + proc.stderr

    script("scripts.tok_train", f"--vocab-size={args.vocab}", "--max-chars=10000000")

    def train(steps: int, seed: int) -> dict:
        started = time.monotonic()
        log = script("scripts.base_train", f"--depth={args.depth}", f"--max-seq-len={args.seq}",
                     f"--device-batch-size={args.batch}", f"--total-batch-size={args.batch * args.seq}",
                     f"--num-iterations={steps}", f"--eval-every={steps}", "--eval-tokens=1048576",
                     "--core-metric-every=-1", "--sample-every=-1", "--window-pattern=L", f"--seed={seed}")
        wall = time.monotonic() - started
        bpb = [float(x) for x in re.findall(r"[Vv]alidation bpb:\s*([0-9.]+)", log)]
        tps = [int(x.replace(",", "")) for x in re.findall(r"tok/sec:\s*([0-9,]+)", log)]
        return {"tokens_per_second": sum(tps[1:]) / max(1, len(tps) - 1) if tps else None, "wall_seconds": wall,
                "tokens": steps * args.batch * args.seq, "bpb_whole": None, "bpb_doc_starts": bpb[-1] if bpb else None}

    seeds = [train(args.steps, seed) for seed in range(args.seeds)]
    tps = seeds[0]["tokens_per_second"] or 1.0
    steps = max(2, int(args.wall_seconds * tps / (args.batch * args.seq)))
    return {"nanochat": {"seeds": seeds, "wall": train(steps, 0), "wall_steps": steps}}


def table(results: dict) -> str:
    def fmt(value, digits=3):
        return "—" if value is None else f"{value:.{digits}f}"

    lines = ["| trainer | tokens/s | BPB whole (seeds) | BPB doc starts (seeds) | wall steps | BPB whole @wall | BPB doc starts @wall |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        seeds = r["seeds"]
        lines.append(f"| {name} | {fmt(seeds[0]['tokens_per_second'], 0)} | "
                     f"{' / '.join(fmt(s['bpb_whole']) for s in seeds)} | {' / '.join(fmt(s['bpb_doc_starts']) for s in seeds)} | "
                     f"{r['wall_steps']} | {fmt(r['wall']['bpb_whole'])} | {fmt(r['wall']['bpb_doc_starts'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--corpus-mb", type=float, default=30.0)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--wall-seconds", type=float, default=600.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tt-optimizers", default="muon,adamw")
    parser.add_argument("--nanochat", type=Path)
    parser.add_argument("--nanochat-python")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    train, held, where = python_corpus(int(args.corpus_mb * 1e6))
    corpus, validation = work / "corpus.jsonl", work / "validation.jsonl"
    write_jsonl(corpus, train)
    write_jsonl(validation, held)
    load = os.getloadavg()
    results = tt_side(args, work, corpus, validation)
    if args.nanochat is not None:
        results.update(nanochat_run(args, work, train, held))
    summary = {"corpus": where, "train_files": len(train), "held_files": len(held), "load_average_start": load,
               "load_average_end": os.getloadavg(), "args": {k: str(v) for k, v in vars(args).items()}, "results": results}
    (work / "results.json").write_text(json.dumps(summary, indent=1))
    print(f"corpus: {where}; {len(train)} training files, {len(held)} held out; load average {load} -> {os.getloadavg()}")
    print(table(results))


if __name__ == "__main__":
    main()
