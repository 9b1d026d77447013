"""Stage `token_cache`: encode the corpus once, streaming, into `pretrain/recovery/pretrain-tokens.bin`.

With `packing: bos_aligned` (the default) it also writes the BOS-aligned
best-fit plan of the cache's documents into rows of sequence_length + 1
(`pretrain-tokens.packing.bin`, runtime/packing.py) and records its summary
and sha256 in the manifest. A cache built from the same inputs (sources,
tokenizer, max_chars, packing and row length) is verified against its manifest and reused. A cache from other inputs is rebuilt unless
pretraining checkpoints already depend on it (then: use a new run directory).
"""

from __future__ import annotations

import time

import numpy as np
from typing import Any, Mapping

from tt_stagekit import protocol
from tt_stagekit.contract import StageResult
from tt_stagekit.files import atomic_file, file_sha256
from tt_engine_foundation.runtime import token_cache
from tt_engine_foundation.runtime import tokenizer
from tt_engine_foundation.runtime.config import FoundationRequest
from tt_engine_foundation.runtime.corpus import iter_run_corpus, run_corpus


def main(request: FoundationRequest) -> StageResult:
    cfg = request.cfg
    lay = request.layout
    tok = tokenizer.load_run_tokenizer(lay.tokenizer_json)
    corpus = (cfg.corpus_path, request.system_message, request.train_rows)
    _, _, source = run_corpus(*corpus)
    dtype = token_cache.dtype_for(cfg.vocab_size)
    inputs = {
        "corpus": source,
        "tokenizer_sha256": file_sha256(lay.tokenizer_json),
        "max_chars": cfg.max_chars,
        "dtype": dtype.str,
        "format": "bos-prefixed documents",
    }
    if cfg.packing == "bos_aligned":  # the packing plan depends on the row length
        inputs["packing"] = {"kind": "bos_best_fit", "row_tokens": cfg.sequence_length + 1}
    manifest = token_cache.read_manifest(lay.tokens_manifest)
    if manifest is not None and lay.tokens_bin.exists():
        if manifest.get("inputs") == inputs:
            token_cache.verify(lay.tokens_bin, manifest)
            if cfg.packing == "bos_aligned":
                token_cache.verify_packing(lay.tokens_packing, manifest)
            protocol.log("token cache already built from these inputs and verified; reusing it")
            return _result(lay, manifest, 0.0)
        if lay.has_pretrain_checkpoints():
            raise protocol.InvalidInput(
                "the corpus, tokenizer, max_chars, packing or sequence_length changed since this run directory's pretraining "
                "checkpoints were made; use a new run directory (nothing was changed)"
            )
    lay.recovery.mkdir(parents=True, exist_ok=True, mode=0o700)
    started = time.monotonic()
    last = [started]

    def on_progress(tokens: int, chars: int, documents: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 2.0:
            last[0] = now
            protocol.progress(chars, cfg.max_chars, "chars", {"tokens": tokens, "documents": documents})

    cut: dict[str, Any] = {}

    def on_cut(doc) -> None:
        cut["at"] = f"{doc.source}:{doc.line}"
        protocol.log(cut_note(cfg.max_chars, cut["at"]), "warning")

    built = token_cache.build(
        iter_run_corpus(*corpus, cfg.max_chars, on_cut), tok, tokenizer.special_id(tok, tokenizer.BOS), lay.tokens_bin, dtype,
        on_progress=on_progress,
    )
    seconds = time.monotonic() - started
    packed = _pack(lay, cfg, tok, dtype, built["documents"]) if cfg.packing == "bos_aligned" else None
    token_cache.write_manifest(lay.tokens_manifest, inputs, {**built, "cut_at": cut.get("at"), "packing": packed}, dtype)
    manifest = token_cache.read_manifest(lay.tokens_manifest)
    token_cache.verify(lay.tokens_bin, manifest)
    protocol.log(f"token cache: {built['tokens']} tokens from {built['documents']} documents in {seconds:.1f}s")
    return _result(lay, manifest, seconds)


def _pack(lay, cfg, tok, dtype, documents: int) -> dict[str, Any]:
    """The BOS-aligned best-fit plan (runtime/packing.py) beside the cache; its summary and hash for the manifest."""
    from tt_engine_foundation.runtime import packing

    tokens = np.fromfile(lay.tokens_bin, dtype=dtype)
    row_tokens = cfg.sequence_length + 1
    table = packing.plan(tokens, tokenizer.special_id(tok, tokenizer.BOS), row_tokens)
    with atomic_file(lay.tokens_packing) as handle:
        handle.write(table.astype("<i8").tobytes())
    record = {**packing.summary(table, row_tokens), "file": {"size": lay.tokens_packing.stat().st_size,
                                                             "sha256": file_sha256(lay.tokens_packing)}}
    protocol.log(f"packed {documents} documents BOS-aligned into {record['rows']} rows of "
                 f"{row_tokens} tokens ({record['fill']:.1%} filled, {record['added_bos']} chunk BOS added)")
    return record


def cut_note(max_chars: int, where: str) -> str:
    return (f"the corpus was cut at foundation.max_chars = {max_chars} characters (from {where} on, text was left "
            "out of the token cache); raise max_chars to pretrain on all of it")


def _result(lay, manifest: Mapping[str, Any], seconds: float) -> StageResult:
    metrics = {"token_cache.tokens": manifest["token_count"], "token_cache.documents": manifest["documents"],
               "token_cache.chars": manifest["chars"], "token_cache.cut": bool(manifest.get("cut_at"))}
    if seconds > 0:
        metrics["token_cache.mb_per_second"] = manifest["chars"] / 1e6 / seconds
    notes = [cut_note(manifest["inputs"]["max_chars"], manifest["cut_at"])] if manifest.get("cut_at") else []
    return StageResult(
        notes=tuple(notes),
        metrics=metrics,
        outputs={"tokens": str(lay.tokens_bin), "manifest": str(lay.tokens_manifest),
                 "sha256": manifest["file"]["sha256"], "token_count": manifest["token_count"]},
    )


if __name__ == "__main__":
    protocol.run_main(main, request_type=FoundationRequest)
