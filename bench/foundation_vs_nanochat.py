"""tt's foundation trainer beside nanochat on the same corpus: tokens/s and validation BPB, both protocols.

Fetches nothing. The corpus is the Python source of the interpreter running this script (its standard
library, `sys.base_prefix/lib/pythonX.Y`, files sorted by path, read as UTF-8, every 20th file by the
sha256 of its path held out), cut at --corpus-mb. Both trainers get the same files, depth, vocabulary,
sequence length and tokens per step.

- tt: the foundation engine's own stages (tokenizer, token_cache, pretrain, bpb) as subprocesses of the
  engine environment, one run per seed and per optimizer given (--tt-optimizers muon,adamw; --tt-set
  KEY=JSON for any other foundation setting). The bpb stage reports both protocols: the whole held-out
  text in consecutive windows, and each held-out document's first seq + 1 tokens from its BOS.
- nanochat (with --nanochat DIR --nanochat-python PY: a checkout and the interpreter of an environment it
  was installed into, bench-only; bench/nanochat_helper.py runs inside it): the texts written as its
  parquet shards (the last one is its validation split), its own `scripts.tok_train` and
  `scripts.base_train` (its defaults: Muon + AdamW, warm-up 40 steps, warm-down 0.65 to 0.05,
  torch.compile; full attention, `--window-pattern=L`, since PyTorch's SDPA has no sliding window),
  seeded by 42 + seed (base_train itself always seeds 42). Its final checkpoint is scored by tt's own
  runtime/bpb.py under both protocols, so one definition scores both trainers, and by nanochat's
  `evaluate_bpb` over its own validation loader (reported as `bpb_nanochat_loader` in results.json).
  Its tokens/s is its logged step times after step 10 (its own convention: the first steps compile).

Equal tokens: --steps steps of --batch x --seq tokens, each of --seeds seeds, the trainers alternating
(seed 0 of every trainer, then seed 1, ...) so that changes in machine load reach all alike; the load
average before and after every run is recorded. Equal wall clock: each trainer then trains (seed 0) for
as many steps as --wall-seconds of its mean measured tokens/s buys (compute time; start-up, nanochat's
compilation and scoring are not counted).

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


def tt_config(args, corpus: Path, held: Path, optimizer: str) -> dict:
    cfg = {"corpus_path": str(corpus), "validation_path": str(held), "depth": args.depth, "vocab_size": args.vocab,
           "sequence_length": args.seq, "batch_size": args.batch, "pretrain_steps": args.steps,
           "tokenizer_max_chars": 10_000_000, "checkpoint_interval_steps": 0, "checkpoint_interval_seconds": 0,
           "log_interval_steps": 10, "finetune_steps": 0, "device": "cpu", "bpb_max_chars": 100_000_000,
           "optimizer": optimizer, "lr_schedule": "warmdown" if optimizer == "muon" else "cosine"}
    for item in args.tt_set:
        key, _, value = item.partition("=")
        cfg[key] = json.loads(value)
    return cfg


class Nanochat:
    """nanochat's own tokenizer and base_train scripts (through bench/nanochat_helper.py) on the same texts."""

    def __init__(self, args, work: Path, train: list[str], held: list[str]) -> None:
        self.args, self.work = args, work
        self.texts = work / "nanochat-texts.json"
        self.texts.write_text(json.dumps({"train": train, "held": held}))
        self.env = {**os.environ, "NANOCHAT_BASE_DIR": str(work / "nanochat-home"), "OMP_NUM_THREADS": str(args.threads),
                    "WANDB_MODE": "disabled"}
        self.helper("shards", str(self.texts))
        self.script("scripts.tok_train", f"--vocab-size={args.vocab}", "--max-chars=10000000")

    def _run(self, argv: list[str], name: str) -> str:
        log = self.work / f"{name}.log"
        with log.open("w") as out:
            proc = subprocess.run([self.args.nanochat_python, *argv], cwd=self.args.nanochat, env=self.env,
                                  stdout=out, stderr=subprocess.STDOUT, text=True)
        text = log.read_text()
        if proc.returncode != 0:
            raise SystemExit(f"nanochat {' '.join(argv[:3])} failed ({proc.returncode}), log {log}:\n{text[-3000:]}")
        return text

    def helper(self, *argv: str, name: str = "nanochat-helper") -> str:
        return self._run([str(ROOT / "bench" / "nanochat_helper.py"), *argv], name)

    def script(self, module: str, *argv: str) -> str:
        return self._run(["-m", module, *argv], module.split(".")[-1])

    def run(self, steps: int, seed: int, name: str) -> dict:
        a = self.args
        started = time.monotonic()
        log = self.helper("train", str(seed), "--", f"--depth={a.depth}", f"--max-seq-len={a.seq}",
                          f"--device-batch-size={a.batch}", f"--total-batch-size={a.batch * a.seq}",
                          f"--num-iterations={steps}", "--eval-every=-1", "--core-metric-every=-1",
                          "--sample-every=-1", "--window-pattern=L", "--device-type=cpu", f"--model-tag={name}",
                          name=name)
        wall = time.monotonic() - started
        dts = {int(step): float(dt) for step, dt in re.findall(r"step (\d+)/\d+ .*?\| dt: ([0-9.]+)ms", log)}
        timed = [dt for step, dt in dts.items() if step > 10] or [dt for step, dt in dts.items() if step > 0]
        tps = a.batch * a.seq * len(timed) / (sum(timed) / 1000) if timed else None
        out = self.work / f"{name}-score.json"
        self.helper("score", name, str(steps), str(self.texts), str(a.seq), str(a.batch), str(out), name=f"{name}-score")
        scores = json.loads(out.read_text())
        return {"tokens_per_second": tps, "wall_seconds": wall, "train_seconds": sum(dts.values()) / 1000,
                "tokens": steps * a.batch * a.seq, **scores}


def run_slug(name: str) -> str:
    """'tt (muon, document_start_share=0.3)' -> 'muon-document_start_share-0.3', a folder name."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", name.split("(", 1)[1].rstrip(")")).strip("-")


def timed(record: dict, run) -> dict:
    """`run()` with the load average before and after it."""
    before = os.getloadavg()
    result = run()
    result["load_average"] = [before, os.getloadavg()]
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, (list, dict))} | {"load": result["load_average"]}),
          flush=True)
    record.update(result)
    return result


def new_record(records: list) -> dict:
    records.append({})
    return records[-1]


def mean(values: list) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def table(results: dict) -> str:
    def fmt(value, digits=3):
        return "—" if value is None else f"{value:.{digits}f}"

    lines = ["| trainer | tokens/s (seeds) | BPB whole, equal tokens (seeds) | BPB doc starts, equal tokens (seeds) | "
             "wall steps | BPB whole, equal wall clock | BPB doc starts, equal wall clock |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        seeds, wall = r["seeds"], r.get("wall") or {}
        lines.append(f"| {name} | {' / '.join(fmt(s.get('tokens_per_second'), 0) for s in seeds)} | "
                     f"{' / '.join(fmt(s.get('bpb_whole')) for s in seeds)} | "
                     f"{' / '.join(fmt(s.get('bpb_doc_starts')) for s in seeds)} | "
                     f"{r.get('wall_steps', '—')} | {fmt(wall.get('bpb_whole'))} | {fmt(wall.get('bpb_doc_starts'))} |")
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
    parser.add_argument("--wall-seconds", type=float, default=600.0, help="0: no equal-wall-clock runs")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tt-optimizers", default="muon", help="comma-separated: muon, adamw")
    parser.add_argument("--tt-set", action="append", default=[], metavar="KEY=JSON",
                        help="a foundation setting for tt's runs (repeatable), e.g. warmdown_fraction=0.65")
    parser.add_argument("--tt-variant", action="append", default=[], metavar="KEY=JSON",
                        help="one more tt row (repeatable): the first optimizer's configuration with this setting")
    parser.add_argument("--nanochat", type=Path, help="a nanochat checkout")
    parser.add_argument("--nanochat-python", help="the interpreter of the environment nanochat is installed in")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = os.environ["TT_NUM_THREADS"] = str(args.threads)
    # OpenMP threads that spin while waiting take the cores from each other on a shared machine: two
    # threads measured 3-4x slower than one at load 5-8 with the default policy, equal with PASSIVE.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    train, held, where = python_corpus(int(args.corpus_mb * 1e6))
    corpus, validation = work / "corpus.jsonl", work / "validation.jsonl"
    write_jsonl(corpus, train)
    write_jsonl(validation, held)
    load = os.getloadavg()
    optimizers = args.tt_optimizers.split(",")
    cfgs = {f"tt ({o})": tt_config(args, corpus, validation, o) for o in optimizers}
    for item in args.tt_variant:  # the same tokenizer and token cache, one setting changed
        key, _, value = item.partition("=")
        cfgs[f"tt ({optimizers[0]}, {key}={value})"] = {**cfgs[f"tt ({optimizers[0]})"], key: json.loads(value)}
    base = work / "tt-base"
    if not (base / "token_cache" / "result.json").is_file():
        base.mkdir(parents=True, exist_ok=True)
        first = next(iter(cfgs.values()))
        run_tt_stage(base, "tokenizer", first)
        run_tt_stage(base, "token_cache", first)
    nanochat = Nanochat(args, work, train, held) if args.nanochat is not None else None
    results: dict[str, dict] = {name: {"seeds": []} for name in cfgs}
    if nanochat is not None:
        results["nanochat"] = {"seeds": []}
    for seed in range(args.seeds):  # alternate the trainers, so load changes reach both alike
        for name, cfg in cfgs.items():
            slug = run_slug(name)
            timed(new_record(results[name]["seeds"]), lambda: tt_run(work, base, {**cfg, "seed": seed}, f"tt-{slug}-seed{seed}"))
        if nanochat is not None:
            timed(new_record(results["nanochat"]["seeds"]), lambda: nanochat.run(args.steps, seed, f"nanochat-seed{seed}"))
    if args.wall_seconds > 0:
        for name, r in results.items():
            tps = mean([s["tokens_per_second"] for s in r["seeds"]])
            r["wall_steps"] = max(2, int(args.wall_seconds * tps / (args.batch * args.seq)))
        for name, r in results.items():
            r["wall"] = {}
            if name == "nanochat":
                timed(r["wall"], lambda: nanochat.run(r["wall_steps"], 0, "nanochat-wall"))
            else:
                slug = run_slug(name)
                timed(r["wall"], lambda: tt_run(work, base, {**cfgs[name], "seed": 0, "pretrain_steps": r["wall_steps"]},
                                                f"tt-{slug}-wall"))
    summary = {"corpus": where, "train_files": len(train), "held_files": len(held), "load_average_start": load,
               "load_average_end": os.getloadavg(), "args": {k: str(v) for k, v in vars(args).items()}, "results": results}
    (work / "results.json").write_text(json.dumps(summary, indent=1))
    print(f"corpus: {where}; {len(train)} training files, {len(held)} held out; load average {load} -> {os.getloadavg()}")
    print(table(results))


if __name__ == "__main__":
    main()
