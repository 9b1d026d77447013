"""Stage `preference`: DPO, SimPO or KTO on the SFT adapter, from the reference stage's pairs.

Loads the base model with the train stage's adapter, trainable (one model in memory: the reference
log-probs were computed by the reference stage and are read from its pairs.jsonl; this stage runs no
reference forward, `preference.reference_forwards` is 0). Trains with runtime/preference/train.py
(checkpoints under `preference/checkpoints/`, resumed when the host passes `resume`), then writes the adapter
to `preference/adapter/` like the train stage (runtime/adapter_out.publish_adapter, its tt-adapter.json recording
the tuning: `{"stage": "preference", "loss": ..., <the preference block>, "completed_steps", "from"}`) and registers
it: it is the run's model. Before the first step and after the last, a probe of training prompts is answered
greedily and graded (runtime/preference/probe.py): `preference.probe_score` (the SFT adapter's) and
`preference.probe_score_after`; a lower score after is a warning naming `preference.sft_weight` first.
"""

from __future__ import annotations

import shutil
from typing import Any

from tt_engine_adapter.runtime import model_source
from tt_engine_adapter.runtime.config import AdapterRequest
from tt_stagekit.contract import Artifact, StageResult
from tt_stagekit.protocol import InvalidInput, StageError, artifact, log, progress, read_request, run_main

model_source.go_offline()


def _graders() -> Any:
    """The spec's graders for the probe, or None (said) when the spec gives none that can grade."""
    from tt_stagekit.graders import GraderError, from_spec

    try:
        return from_spec(read_request(None)["spec"])  # the graders' entries are read as the spec's JSON
    except GraderError as exc:
        log(f"probe: no graders ({exc}); the stage cannot say whether it made the model worse than SFT")
        return None


def main(request: AdapterRequest) -> StageResult:
    import torch
    from peft import PeftModel

    from tt_engine_adapter.runtime import chat, manifest
    from tt_engine_adapter.runtime.adapter_out import publish_adapter, save_weights, tuning_record
    from tt_engine_adapter.runtime.data import read_jsonl
    from tt_engine_adapter.runtime.preference import probe
    from tt_engine_adapter.runtime.preference.pairs import encode_kl, encode_pair
    from tt_engine_adapter.runtime.preference.train import train_preference

    hp, pref = request.hp, request.spec.preference
    if pref is None:
        raise InvalidInput("the preference stage needs the spec's preference block")
    pairs_path, adapter = request.output("reference", "pairs"), request.output("train", "adapter")
    if pairs_path is None or adapter is None:
        raise StageError("the train and reference stages have not completed in this run")
    base = model_source.resolved(request)
    device = model_source.pick_device(request)
    dtype = model_source.pick_dtype(device, hp.precision)
    tokenizer = model_source.load_tokenizer(base["path"])
    pairs = read_jsonl(pairs_path)
    eot = chat.end_of_turn_id(tokenizer)
    encoded = [encode_pair(tokenizer, p, request.system_message, hp.max_seq_length, eot) for p in pairs]
    kl_rows = encode_kl(tokenizer, pairs, request.system_message, hp.max_seq_length, eot)
    padding_choice = chat.padding(tokenizer)

    torch.manual_seed(hp.seed)
    model = PeftModel.from_pretrained(model_source.load_model(base["path"], device, dtype, hp.load_in_4bit), adapter,
                                      is_trainable=True)
    log(f"{pref.loss} (beta {pref.beta}" + (f", gamma {pref.simpo_gamma}" if pref.loss == "simpo" else "")
        + (f", sft_weight {pref.sft_weight}" if pref.sft_weight else "") + f") on {len(pairs)} pairs from the SFT "
        f"adapter {adapter}; reference log-probs ({request.output('reference', 'reference')}) read from {pairs_path}")
    graders = _graders()
    rows = probe.probe_rows(read_jsonl(request.prepared["train"])) if graders else []
    before = probe.score(model, tokenizer, rows, graders, hp, device) if rows else None
    if before is not None:
        log(f"probe: the SFT adapter's greedy answers to {len(rows)} training prompts score {before} "
            f"({', '.join(g.name for g in graders.graders)}); answered again after the last step")
    checkpoints = request.stage_dir / "checkpoints"
    if not request.resume:
        shutil.rmtree(checkpoints, ignore_errors=True)

    def on_step(step: int, total: int, loss: float, stats: dict) -> None:
        if step % hp.log_interval_steps == 0 or step == total:
            progress(step, total, "step", {"loss": round(loss, 6), "lr": stats["lr"],
                                           "reward_margin": round(stats["reward_margin"], 4),
                                           "reward_accuracy": round(stats["reward_accuracy"], 4)})

    state = train_preference(model, encoded, kl_rows, pairs, hp, pref, pad_id=padding_choice.id, device=device,
                             checkpoint_dir=checkpoints, stage_fingerprint=request.fingerprint,
                             resume=request.resume, on_step=on_step)
    after = probe.score(model, tokenizer, rows, graders, hp, device) if rows else None
    if after is not None:
        log(f"probe prompts after step {state.step}: greedy score {before} (SFT) → {after}")
        if after < before:
            log(probe.worse_note(before, after, len(rows), pref, state.step), "warning")
        graders.close()
    metrics = {
        "preference.final_loss": state.losses[-1][1] if state.losses else None,
        "preference.reward_margin": state.margins[-1][1] if state.margins else None,
        "preference.reward_accuracy": state.accuracy[-1][1] if state.accuracy else None,
        "preference.steps": state.step,
        "preference.pairs": len(pairs),
        "preference.seconds": round(state.seconds, 3),
        "preference.reference_forwards": 0,
        "preference.probe_score": before,
        "preference.probe_score_after": after,
    }
    metrics = {k: v for k, v in metrics.items() if v is not None}
    adapter_dir = request.stage_dir / "adapter"
    publish_adapter(request, base, tokenizer, padding_choice, adapter_dir, lambda tmp: save_weights(model, tmp),
                    metrics, tuning_record("preference", pref, state.step, adapter))
    artifact("adapter", adapter_dir)
    log(f"adapter saved to {adapter_dir} ({pref.loss} final loss {metrics.get('preference.final_loss')}, reward "
        f"margin {metrics.get('preference.reward_margin')})")
    return StageResult(
        metrics=metrics,
        series={"preference.loss": state.losses, "preference.reward_margin": state.margins},
        outputs={"adapter": str(adapter_dir)},
        artifacts=(Artifact(kind="adapter", path=str(adapter_dir), manifest=manifest.MANIFEST),),
    )


if __name__ == "__main__":
    run_main(main, request_type=AdapterRequest)
