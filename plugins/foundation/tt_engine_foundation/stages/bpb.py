"""Stage `bpb`: bits per byte of the pretrained model on `validation_path` (held out) or the smoke corpus.

Two figures (runtime/bpb.py): `bpb.value` over the whole text in consecutive windows, and
`bpb.document_starts` over each document's first sequence_length + 1 tokens from its BOS (the protocol
of trainers whose rows all start at a document, nanochat's), so either can be compared.
"""

from __future__ import annotations

from tt_stagekit import protocol
from tt_stagekit.contract import StageResult

from tt_engine_foundation.runtime.config import FoundationRequest


def main(request: FoundationRequest) -> StageResult:
    import numpy as np
    import torch

    from tt_engine_foundation.runtime import tokenizer
    from tt_engine_foundation.runtime.bpb import evaluate_bpb, evaluate_bpb_document_starts
    from tt_engine_foundation.formats.shards import list_shards
    from tt_engine_foundation.runtime.corpus import iter_documents, smoke_documents, truncate
    from tt_engine_foundation.runtime.model_io import load_model_dir
    from tt_engine_foundation.runtime.torchsetup import autocast_dtype, open_stage

    device, tok = open_stage(request)
    cfg = request.cfg
    lay = request.layout
    validation = cfg.validation_path
    cap = cfg.bpb_max_chars
    cut: list[str] = []

    def on_cut(doc) -> None:
        cut.append(f"bits per byte measured on the first foundation.bpb_max_chars = {cap} characters of the "
                   f"{'validation' if validation else 'smoke'} text (from {doc.source}:{doc.line} on, text was left "
                   "out); raise bpb_max_chars to measure all of it")
        protocol.log(cut[-1], "warning")

    if validation:
        docs = iter_documents(list_shards(validation), cap, on_cut)
        source = "validation"
    else:
        docs = truncate(
            smoke_documents(request.system_message, request.train_rows), cap, on_cut
        )
        source = "smoke"
    bos = tokenizer.special_id(tok, tokenizer.BOS)
    ids: list[int] = []
    for doc in docs:
        ids.append(bos)
        ids.extend(tokenizer.encode(tok, doc.text))
    if len(ids) < 2:
        raise protocol.StageError(f"{validation or 'smoke corpus'}: no text to measure bits per byte on")
    model = load_model_dir(lay.model_dir("pretrain"), device)
    table = torch.tensor(tokenizer.token_bytes(tok) + [0] * max(0, model.cfg.vocab_size - tok.get_vocab_size()), dtype=torch.int64)
    out = evaluate_bpb(model, np.asarray(ids, dtype=np.int64), cfg.sequence_length, cfg.batch_size,
                       table, device, autocast_dtype(cfg, device))
    starts = evaluate_bpb_document_starts(model, np.asarray(ids, dtype=np.int64), bos, cfg.sequence_length,
                                          cfg.batch_size, table, device, autocast_dtype(cfg, device))
    protocol.log(f"bits per byte on the {source} text: {out['bpb']:.4f} over {out['bytes']} bytes; "
                 f"{starts['bpb']:.4f} over document starts ({starts['bytes']} bytes)")
    notes = list(cut)
    if source == "smoke":
        notes.append("BPB measured on the smoke corpus (training text, not held out): it proves the wiring, not capability")
    return StageResult(
        metrics={"bpb.value": out["bpb"], "bpb.source": source, "bpb.bytes": out["bytes"], "bpb.targets": out["targets"],
                 "bpb.document_starts": starts["bpb"], "bpb.document_starts_bytes": starts["bytes"]},
        outputs={"source": source, "path": str(validation) if validation is not None else None},
        notes=tuple(notes),
    )


if __name__ == "__main__":
    protocol.run_main(main, request_type=FoundationRequest)
