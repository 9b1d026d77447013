"""nanochat's half of bench/foundation_vs_nanochat.py, run by the interpreter of nanochat's bench-only environment.

Run with the nanochat checkout as the working directory and NANOCHAT_BASE_DIR set (the bench does both):

    python nanochat_helper.py shards TEXTS.json        # the corpus as parquet shards (last = validation)
    python nanochat_helper.py train SEED -- ARGS...    # scripts.base_train with ARGS, weights seeded by SEED
    python nanochat_helper.py score TAG STEP TEXTS.json SEQ BATCH OUT.json

`train`: nanochat's base_train seeds torch with 42 in `compute_init` and has no seed option, so this
wraps `compute_init` to reseed with 42 + SEED right after it (the model is initialised after it; the data
order, which nanochat's loader fixes, is the same for every seed).

`score`: the final checkpoint, through nanochat's own `build_model` and tokenizer, scored by tt's
`runtime/bpb.py` (loaded by path: it needs only numpy and torch), so both trainers are scored by one
definition of each protocol: the whole held-out text in consecutive windows (documents joined, each
after a BOS), and each document's first seq + 1 tokens from its BOS. It also reports nanochat's own
`evaluate_bpb` over its validation loader (BOS-aligned best-fit rows, cropped), for as many rows as the
document-start protocol scores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys
from pathlib import Path

TT_BPB = Path(__file__).resolve().parents[1] / "plugins" / "foundation" / "tt_engine_foundation" / "runtime" / "bpb.py"


def shards(texts_path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nanochat.dataset import DATA_DIR

    texts = json.loads(Path(texts_path).read_text(encoding="utf-8"))
    os.makedirs(DATA_DIR, exist_ok=True)
    pq.write_table(pa.table({"text": texts["train"]}), os.path.join(DATA_DIR, "shard_00000.parquet"), row_group_size=1024)
    pq.write_table(pa.table({"text": texts["held"]}), os.path.join(DATA_DIR, "shard_00001.parquet"), row_group_size=1024)


def train(seed: int, argv: list[str]) -> None:
    import torch

    import nanochat.common as common

    original = common.compute_init

    def seeded_compute_init(*args, **kwargs):
        out = original(*args, **kwargs)
        torch.manual_seed(42 + seed)
        return out

    common.compute_init = seeded_compute_init
    sys.argv = ["scripts.base_train", *argv]
    runpy.run_module("scripts.base_train", run_name="__main__", alter_sys=True)


class _AnyLength:
    """nanochat's training forward asserts more than one position; a one-token row is scored with one padding
    token after it (causal attention: the first position's logits do not see it)."""

    def __init__(self, model) -> None:
        self.model = model

    def eval(self):
        return self.model.eval()

    def __call__(self, idx):
        import torch

        if idx.size(1) > 1:
            return self.model(idx)
        return self.model(torch.cat([idx, idx], dim=1))[:, :1]


def score(tag: str, step: int, texts_path: str, seq: int, batch: int, out_path: str) -> None:
    import numpy as np
    import torch

    from nanochat.checkpoint_manager import build_model
    from nanochat.common import get_base_dir
    from nanochat.dataloader import tokenizing_distributed_data_loader_bos_bestfit
    from nanochat.loss_eval import evaluate_bpb as nanochat_evaluate_bpb
    from nanochat.tokenizer import get_token_bytes

    spec = importlib.util.spec_from_file_location("tt_bpb", TT_BPB)
    tt_bpb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tt_bpb)

    device = torch.device("cpu")
    checkpoint_dir = os.path.join(get_base_dir(), "base_checkpoints", tag)
    model, tokenizer, _ = build_model(checkpoint_dir, step, device, phase="eval")
    scorer = _AnyLength(model)
    token_bytes = get_token_bytes(device="cpu").to(torch.int64)
    bos = tokenizer.get_bos_token_id()
    held = json.loads(Path(texts_path).read_text(encoding="utf-8"))["held"]
    ids: list[int] = []
    for tokens in tokenizer.encode(held, prepend=bos):
        ids.extend(tokens)
    ids_np = np.asarray(ids, dtype=np.int64)
    whole = tt_bpb.evaluate_bpb(scorer, ids_np, seq, batch, token_bytes, device)
    starts = tt_bpb.evaluate_bpb_document_starts(scorer, ids_np, bos, seq, batch, token_bytes, device)
    batches = -(-len(held) // batch)  # one row per held-out document, as many as the document-start protocol
    loader = tokenizing_distributed_data_loader_bos_bestfit(tokenizer, batch, seq, split="val", device="cpu")
    native = nanochat_evaluate_bpb(model, loader, batches, token_bytes)
    Path(out_path).write_text(json.dumps({"bpb_whole": whole["bpb"], "bpb_whole_bytes": whole["bytes"],
                                          "bpb_doc_starts": starts["bpb"], "bpb_doc_starts_bytes": starts["bytes"],
                                          "bpb_nanochat_loader": native, "nanochat_loader_rows": batches * batch}))


def main() -> None:
    sys.path.insert(0, os.getcwd())  # the nanochat checkout: its `nanochat` and `scripts` packages
    command = sys.argv[1]
    if command == "shards":
        shards(sys.argv[2])
    elif command == "train":
        dash = sys.argv.index("--")
        train(int(sys.argv[2]), sys.argv[dash + 1:])
    elif command == "score":
        score(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    else:
        raise SystemExit(f"unknown command {command!r} (shards, train, score)")


if __name__ == "__main__":
    main()
