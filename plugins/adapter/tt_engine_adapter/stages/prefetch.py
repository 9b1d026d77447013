"""Stage `prefetch`: resolve the base model once and prove the chat template works on every row.

A local folder is fingerprinted; a hub id is downloaded at its pinned revision
into the Hugging Face cache. Then the tokenizer renders and tokenizes every
training row with the exact training code, so a template that cannot render,
an answer that cannot fit or a row with no supervised token fails the run here, before any evaluation or training. A row whose
instruction and answer cannot fit `max_seq_length` even with an empty user
message fails it with exit 2 (invalid input) naming the setting; rows that
lose user text to fit are counted (`data.trimmed_rows`, a report note).
The padding choice (runtime.chat.padding: the model's pad token, else EOS, else
end-of-turn; always masked by position) is recorded in `outputs.padding`, with a
report note when the model has no dedicated pad token.
"""

from __future__ import annotations

from tt_engine_adapter.runtime import model_source
from tt_engine_adapter.runtime.config import AdapterRequest
from tt_stagekit.contract import StageResult
from tt_stagekit.promptfit import trimmed_note
from tt_stagekit.protocol import log, run_main


def main(request: AdapterRequest) -> StageResult:
    spec = request.spec
    if spec.is_local:
        model_source.go_offline()
    base = model_source.fetch(spec.base_model, spec.base_model_revision)
    model_source.go_offline()
    from transformers import AutoConfig

    from tt_engine_adapter.runtime import chat
    from tt_engine_adapter.runtime.data import encode_rows, read_jsonl

    AutoConfig.from_pretrained(base["path"], local_files_only=True)
    tokenizer = model_source.load_tokenizer(base["path"])
    hp = request.hp
    rows = read_jsonl(request.prepared["train"])
    encoded = encode_rows(tokenizer, rows, hp.max_seq_length, hp.train_on_turns)
    trimmed = sum(1 for e in encoded if e.trimmed)
    notes = [trimmed_note(trimmed, len(encoded), "training rows", "hyperparameters.max_seq_length",
                          hp.max_seq_length)] if trimmed else []
    pad = chat.padding(tokenizer)
    if not pad.dedicated:
        notes.append(pad.note())
    for note in notes:
        log(note, "warning")
    eot = chat.end_of_turn_id(tokenizer)
    log(f"base model {base['name']} ready at {base['path']}; end-of-turn {tokenizer.convert_ids_to_tokens(eot)!r}, "
        f"padding {pad.token!r} ({pad.source}, masked by position)")
    return StageResult(
        metrics={
            "data.train_tokens": sum(len(e.input_ids) for e in encoded),
            "data.supervised_tokens": sum(e.supervised for e in encoded),
            "data.trimmed_rows": trimmed,
        },
        notes=tuple(notes),
        outputs={
            "base_model": base,
            "end_of_turn_token": tokenizer.convert_ids_to_tokens(eot),
            "pad_token": pad.token,
            "padding": pad.record(),
        },
    )


if __name__ == "__main__":
    run_main(main, request_type=AdapterRequest)
