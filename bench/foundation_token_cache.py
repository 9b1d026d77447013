"""Token-cache throughput against raw `Tokenizer.encode_batch`, and its peak memory versus corpus size.

1. Writes a synthetic JSONL corpus (varied words, numbers, punctuation) of the
   given sizes, trains a tokenizer on its first 2 MB.
2. Throughput: `encode_batch` alone on the same texts held in memory (same
   batches), against the engine's streaming build (JSONL parsing, encoding,
   uint16 packing, sha256, writing) on the smaller corpus. Target: >= 0.8.
3. Memory: the real `token_cache` stage as a subprocess on each corpus; its
   peak RSS comes from wait4. Target: no growth with corpus size.

    <foundation env>/bin/python bench/foundation_token_cache.py [--sizes 20 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "foundation"
sys.path.insert(0, str(PLUGIN))

import numpy as np  # noqa: E402

from tt_engine_foundation.runtime import token_cache as TC  # noqa: E402
from tt_engine_foundation.runtime import tokenizer as T  # noqa: E402
from tt_engine_foundation.formats.shards import list_shards  # noqa: E402
from tt_engine_foundation.runtime.corpus import iter_documents  # noqa: E402

WORDS = ("the of and to in is was for on that with as by at from his her they this which you one all were when "
         "there can an each said do their time if will way about many then them write would like so these long "
         "make thing see him two has look more day could go come did number sound most people over know water "
         "than call first who may down side been now find any new work part take get place made live where after").split()


def write_corpus(path: Path, megabytes: int, seed: int = 0) -> None:
    r = random.Random(seed)
    target = megabytes * 1_000_000
    written = 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < target:
            words = [r.choice(WORDS) if r.random() > 0.08 else str(r.randint(0, 9999)) for _ in range(r.randint(20, 200))]
            text = " ".join(words).capitalize() + r.choice([".", "!", "?", "..."])
            line = json.dumps({"text": text}) + "\n"
            handle.write(line)
            written += len(line)


def run_stage(run_dir: Path, corpus: Path) -> tuple[float, int, float]:
    """(seconds, peak RSS in MB, text MB) of the real token_cache stage."""
    stage_dir = run_dir / "token_cache"
    stage_dir.mkdir(parents=True, exist_ok=True)
    cfg = {"corpus_path": str(corpus), "vocab_size": 8192, "max_chars": 10**12}
    request = {"protocol": 1, "engine": "foundation", "stage": "token_cache", "run_dir": str(run_dir),
               "stage_dir": str(stage_dir), "result_path": str(stage_dir / "result.json"),
               "spec": {"foundation": cfg}, "system_message": "", "train_rows": [], "device": "cpu", "stages": {}}
    (stage_dir / "request.json").write_text(json.dumps(request))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tt_engine_foundation.stages.token_cache",
                             str(stage_dir / "request.json")], stdout=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(PLUGIN)))
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    assert os.waitstatus_to_exitcode(status) == 0, "token_cache stage failed"
    result = json.loads((stage_dir / "result.json").read_text())
    return seconds, usage.ru_maxrss // 1024, result["metrics"]["token_cache.chars"] / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 200])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        root = Path(tmp)
        corpora = {}
        for size in args.sizes:
            corpora[size] = root / f"corpus-{size}mb.jsonl"
            write_corpus(corpora[size], size)
        small = corpora[min(args.sizes)]
        tok = T.train((d.text for d in iter_documents(list_shards(small), 2_000_000)), 8192)
        (root / "run" / "tokenizer").mkdir(parents=True)
        tok.save(str(root / "run" / "tokenizer" / "tokenizer.json"))
        tok = T.load(root / "run" / "tokenizer" / "tokenizer.json")
        texts = [d.text for d in iter_documents(list_shards(small))]
        batches = list(TC._batches(iter_documents(list_shards(small)), TC.BATCH_CHARS))
        text_mb = sum(len(t.encode()) for t in texts) / 1e6
        start = time.perf_counter()
        for batch in batches:
            tok.encode_batch(batch, add_special_tokens=False)
        raw = text_mb / (time.perf_counter() - start)
        start = time.perf_counter()
        TC.build(iter_documents(list_shards(small)), tok, 0, root / "cache.bin", np.dtype("<u2"))
        ours = text_mb / (time.perf_counter() - start)
        print(json.dumps({"corpus_mb": min(args.sizes), "text_mb": round(text_mb, 1),
                          "raw_encode_batch_mb_s": round(raw, 2), "token_cache_mb_s": round(ours, 2),
                          "ratio": round(ours / raw, 3)}), flush=True)
        for size, corpus in corpora.items():
            run_dir = root / f"run-{size}"
            (run_dir / "tokenizer").mkdir(parents=True)
            (run_dir / "tokenizer" / "tokenizer.json").write_bytes((root / "run/tokenizer/tokenizer.json").read_bytes())
            seconds, rss, mb = run_stage(run_dir, corpus)
            print(json.dumps({"stage_corpus_mb": size, "text_mb": round(mb, 1), "seconds": round(seconds, 1),
                              "stage_mb_s": round(mb / seconds, 2), "peak_rss_mb": rss}), flush=True)


if __name__ == "__main__":
    main()
