"""Stage `tokenizer`: train the byte-level BPE on the corpus head (the smoke corpus when corpus_path is unset).

It reads no example or instruction when a corpus is given, so editing the
examples never invalidates a tokenizer (nor the pretraining built on it).

Writes `<run>/tokenizer/tokenizer.json` and `tokenizer-inputs.json`. An
existing tokenizer made from the same inputs is reused; one made from other
inputs is replaced, unless pretraining checkpoints already depend on it.
Instruction plus the longest answer longer than foundation.sequence_length
(with an empty user message) exits 2 here, before anything is written.
"""

from __future__ import annotations

import json

from tt_stagekit import protocol
from tt_stagekit.contract import StageResult
from tt_stagekit.files import atomic_write_bytes, atomic_write_json, file_sha256
from tt_engine_foundation.runtime import tokenizer
from tt_engine_foundation.runtime.chat import check_fits
from tt_engine_foundation.runtime.config import FoundationRequest
from tt_engine_foundation.runtime.corpus import iter_run_corpus, tokenizer_source


def main(request: FoundationRequest) -> StageResult:
    cfg = request.cfg
    lay = request.layout
    source = tokenizer_source(cfg.corpus_path, request.system_message, request.train_rows)
    inputs = {
        "vocab_size": cfg.vocab_size,
        "tokenizer_max_chars": cfg.tokenizer_max_chars,
        "corpus": source,
        "special_tokens": tokenizer.SPECIAL_TOKENS,
    }
    inputs_path = lay.tokenizer_dir / "tokenizer-inputs.json"
    if lay.tokenizer_json.is_file() and inputs_path.is_file():
        previous = json.loads(inputs_path.read_text(encoding="utf-8"))
        if previous.get("inputs") == inputs and previous.get("sha256") == file_sha256(lay.tokenizer_json):
            protocol.log("tokenizer already trained from these inputs; reusing it")
            return _result(lay, previous["vocab"], previous["chars"])
        if lay.has_pretrain_checkpoints():
            raise protocol.InvalidInput(
                "the tokenizer inputs (vocab_size, tokenizer_max_chars or corpus) changed since this run "
                "directory's pretraining checkpoints were made; use a new run directory (nothing was changed)"
            )
    counted = {"chars": 0}

    def cut(doc) -> None:
        protocol.log(f"the tokenizer trains on the first {cfg.tokenizer_max_chars} corpus characters "
                     f"(tokenizer_max_chars); it stopped in {doc.source}:{doc.line}")

    def texts():
        for doc in iter_run_corpus(cfg.corpus_path, request.system_message, request.train_rows,
                                   cfg.tokenizer_max_chars, on_cut=cut):
            counted["chars"] += len(doc.text)
            yield doc.text

    protocol.log(f"training a {cfg.vocab_size}-token byte-level BPE on up to {cfg.tokenizer_max_chars} corpus characters")
    tok = tokenizer.train(texts(), cfg.vocab_size)
    check_fits(tok, cfg.sequence_length, request.system_message, request.answers)  # exit 2 before anything is written or trained on
    lay.tokenizer_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_bytes(lay.tokenizer_json, tok.to_str().encode("utf-8"))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    atomic_write_json(
        inputs_path,
        {"inputs": inputs, "sha256": file_sha256(lay.tokenizer_json), "vocab": vocab, "chars": counted["chars"]},
    )
    protocol.artifact("tokenizer", lay.tokenizer_json)
    return _result(lay, vocab, counted["chars"])


def _result(lay, vocab: int, chars: int) -> StageResult:
    return StageResult(
        metrics={"tokenizer.vocab_size": vocab, "tokenizer.train_chars": chars},
        outputs={"tokenizer": str(lay.tokenizer_json), "sha256": file_sha256(lay.tokenizer_json)},
    )


if __name__ == "__main__":
    protocol.run_main(main, request_type=FoundationRequest)
