"""Stages `chat_eval` and `general_baseline`: greedy batched generation with a KV cache.

`chat_eval` uses the RL model when RL ran, else the SFT model; `general_baseline` the base model SFT started
from (this run's pretrained model, or `foundation.init_model`). Both answer the held-out prompts into
predictions.jsonl rows `{"id", "prediction"}`, which the host joins to the references and scores: `chat_eval` as
the tuned side, `general_baseline` as the base side (metrics `baseline.*`), so the run's verdict reads base →
tuned. Both answer the general-regression prompts (`general_prompts`) into predictions-general.jsonl as the
gate's candidate and baseline, with the same generation settings. With `evaluation.benchmarks` in the spec both
then score their model with lm-evaluation-harness (stages.benchmarks) as the gate's two sides.
"""

from __future__ import annotations

import json
from typing import Any

from tt_stagekit import protocol
from tt_stagekit.contract import StageResult
from tt_stagekit.files import atomic_write_bytes

from tt_engine_foundation.runtime.config import FoundationRequest

EVAL_BATCH = 16


def main(request: FoundationRequest) -> StageResult:
    from tt_engine_foundation.runtime import tokenizer
    from tt_engine_foundation.runtime.generate import generate
    from tt_engine_foundation.runtime.model_io import load_model_dir
    from tt_engine_foundation.runtime.rl import fit_prompts, max_new_tokens
    from tt_engine_foundation.runtime.torchsetup import autocast_dtype, open_stage
    from tt_stagekit.promptfit import trimmed_note

    device, tok = open_stage(request)
    cfg = request.cfg
    lay = request.layout
    baseline = request.stage == "general_baseline"
    if baseline:
        source, folder = "pretrained", lay.base_model  # this run's pretrain/model, or foundation.init_model
    else:
        source = "rl" if "rl" in request.stages and lay.model_dir("rl").is_dir() else "sft"
        folder = lay.model_dir(source)
    model = load_model_dir(folder, device)
    seq = cfg.sequence_length
    budget = max_new_tokens(tok, request.train_rows, seq)
    stop_id, pad_id = tokenizer.special_id(tok, tokenizer.ASSISTANT_END), tokenizer.special_id(tok, tokenizer.PAD)
    trimmed = 0

    def answer(prompts: list, file: str) -> int:
        nonlocal trimmed
        rows = []
        for start in range(0, len(prompts), EVAL_BATCH):
            chunk = prompts[start : start + EVAL_BATCH]
            ids, cut = fit_prompts(tok, chunk, seq - budget)
            trimmed += cut
            outs = generate(model, ids, budget, stop_id, pad_id, device, autocast_dtype=autocast_dtype(cfg, device))
            for prompt, out in zip(chunk, outs):
                text = tok.decode([t for t in out if t != stop_id], skip_special_tokens=True).strip()
                rows.append({"id": prompt["id"], "prediction": text})
            protocol.progress(min(start + EVAL_BATCH, len(prompts)), len(prompts), "prompt", {})
        target = request.stage_dir / file
        atomic_write_bytes(target, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))
        return len(rows)

    metrics: dict[str, Any] = {}
    predictions = general_predictions = scores = None
    answered = 0
    count = answer(list(request.eval_prompts), "predictions.jsonl")
    answered += count
    protocol.log(f"answered {count} held-out prompts with the {source} model")
    predictions, metrics = "predictions.jsonl", {f"{request.stage}.generated": count}
    general = list(request.general_prompts)
    if general:
        count = answer(general, "predictions-general.jsonl")
        answered += count
        protocol.log(f"answered {count} general-regression prompts with the {source} model")
        general_predictions = "predictions-general.jsonl"
    if request.spec.evaluation is not None and request.spec.evaluation.benchmarks is not None:
        from tt_engine_foundation.stages import benchmarks

        del model  # the export is loaded in its place
        scores = benchmarks.score(request, folder, device, metrics)
    metrics[f"{request.stage}.trimmed_prompts"] = trimmed
    notes = (trimmed_note(trimmed, answered, f"{request.stage} prompts",
                          "foundation.sequence_length minus the answer budget", seq - budget),) if trimmed else ()
    return StageResult(metrics=metrics, outputs={"model": str(folder), "max_new_tokens": budget}, notes=notes,
                       predictions=predictions, general_predictions=general_predictions, benchmarks=scores)


if __name__ == "__main__":
    protocol.run_main(main, request_type=FoundationRequest)
