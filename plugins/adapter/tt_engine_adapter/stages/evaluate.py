"""Stages `baseline`, `sft` and `candidate`: greedy generation on the held-out prompts.

`baseline` loads the base model; `candidate` loads the same base model plus
the run's final adapter (the train stage's, or the tuning stage's after it:
tuning.final_adapter_stage) with `PeftModel.from_pretrained` (unmerged, as a
user would); `sft`, run only when a tuning stage follows, loads the train
stage's adapter, so the report shows base, SFT and final side by side. Both use identical generation settings and write `predictions.jsonl`
(`{"id", "prediction"}`), which the host scores. A prebuilt `test` set is
also answered (`predictions-test.jsonl`) and scored here as `<prefix>.test.*`.
The general-regression prompts (`general_prompts`, with their own system
message, never the spec's) are answered into `predictions-general.jsonl`;
the host scores them and applies the gate. With `evaluation.benchmarks` in
the spec, the same model is then scored with lm-evaluation-harness
(tt_stagekit.benchmarks) under the spec's system message; the scores go to the
result as `benchmarks` and the host gates on them (the gates judge the final
model: `sft` answers neither the general set nor the benchmarks).
"""

from __future__ import annotations

import time

from tt_engine_adapter.decode import prefix as shared_prefix
from tt_engine_adapter.runtime import model_source
from tt_engine_adapter.runtime.config import AdapterRequest
from tt_stagekit.contract import StageResult
from tt_stagekit.files import atomic_write_jsonl
from tt_stagekit.protocol import log, progress, run_main, StageError

model_source.go_offline()


def main(request: AdapterRequest) -> StageResult:
    from tt_stagekit.scoring import score_pairs
    from tt_engine_adapter.runtime.data import read_jsonl, with_system
    from tt_engine_adapter.runtime.generate import generate
    from tt_stagekit.promptfit import trimmed_note

    hp = request.hp
    from tt_engine_adapter.formats.tuning import SFT, final_adapter_stage

    prefix = request.stage if request.stage in ("candidate", SFT) else "baseline"
    stage_dir = request.stage_dir
    base = model_source.resolved(request)
    device = model_source.pick_device(request)
    dtype = model_source.pick_dtype(device, hp.precision)
    tokenizer = model_source.load_tokenizer(base["path"])
    system = request.system_message
    prompts = [{"id": p["id"], "messages": with_system(system, p["messages"])} for p in request.eval_prompts]
    if hp.max_eval_examples:
        prompts = prompts[: hp.max_eval_examples]
    test_rows = read_jsonl(request.prepared["test"]) if request.prepared.get("test") else []
    general = list(request.general_prompts)

    model = model_source.load_model(base["path"], device, dtype, hp.load_in_4bit)
    if prefix != "baseline":
        from peft import PeftModel

        made_by = "train" if prefix == SFT else final_adapter_stage(request.spec)
        adapter = request.output(made_by, "adapter")
        if adapter is None:
            raise StageError(f"the {made_by} stage has not completed in this run")
        model = PeftModel.from_pretrained(model, adapter, is_trainable=False)
        log(f"loaded adapter {adapter}")

    log(shared_prefix.note(model))
    settings = dict(max_new_tokens=hp.max_new_tokens, batch_size=hp.eval_batch_size,
                    max_seq_length=hp.max_seq_length, device=device)
    total = len(prompts) + len(test_rows) + len(general)

    def on_batch(offset: int):
        def report(done: int, _: int, seconds: float) -> None:
            progress(offset + done, total, "prompt", {"prompts_per_second": round(done / max(seconds, 1e-9), 2)})
        return report

    started = time.perf_counter()
    stats: dict = {}
    predictions = generate(model, tokenizer, prompts, on_batch=on_batch(0), stats=stats, **settings)
    atomic_write_jsonl(stage_dir / "predictions.jsonl", predictions)
    metrics = {f"{prefix}.eval_seconds": round(time.perf_counter() - started, 3)}
    trimmed = stats["trimmed_prompts"]
    if test_rows:
        test_prompts = [{"id": r["id"], "messages": r["messages"][:-1]} for r in test_rows]
        answers = generate(model, tokenizer, test_prompts, on_batch=on_batch(len(prompts)), stats=stats, **settings)
        trimmed += stats["trimmed_prompts"]
        atomic_write_jsonl(stage_dir / "predictions-test.jsonl", answers)
        metrics.update(score_pairs([a["prediction"] for a in answers],
                                [r["messages"][-1]["content"] for r in test_rows], f"{prefix}.test"))
    general_predictions = None
    if general:
        answers = generate(model, tokenizer, general, on_batch=on_batch(len(prompts) + len(test_rows)), stats=stats,
                           **settings)
        trimmed += stats["trimmed_prompts"]
        atomic_write_jsonl(stage_dir / "predictions-general.jsonl", answers)
        general_predictions = "predictions-general.jsonl"
    benchmarks = request.spec.evaluation.benchmarks if request.spec.evaluation and prefix != SFT else None
    scores = None
    if benchmarks is not None:
        from tt_stagekit.benchmarks import score

        scores = score(metrics, prefix, model, tokenizer, benchmarks, system, hp.eval_batch_size, hp.max_seq_length)
    metrics[f"{prefix}.trimmed_prompts"] = trimmed
    notes = [trimmed_note(trimmed, total, f"{prefix} evaluation prompts", "hyperparameters.max_seq_length",
                          hp.max_seq_length)] if trimmed else []
    log(f"{prefix}: {len(predictions)} held-out prompts answered" +
        (f", {len(test_rows)} prebuilt test prompts" if test_rows else "") +
        (f", {len(general)} general-regression prompts" if general else "") +
        (f", {len(benchmarks.tasks)} benchmark tasks" if benchmarks is not None else ""))
    return StageResult(metrics=metrics, outputs={"predictions": str(stage_dir / "predictions.jsonl")},
                       notes=tuple(notes), predictions="predictions.jsonl", general_predictions=general_predictions,
                       benchmarks=scores)


if __name__ == "__main__":
    run_main(main, request_type=AdapterRequest)
