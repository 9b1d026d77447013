"""Stage `reinforce`: reinforcement after SFT (the spec's `reinforcement` block; its algorithm GRPO), rewarded by
the spec's graders. Vocabulary: runtime/reinforcement/__init__.py.

Loads the base model with the train stage's adapter (trainable), samples groups of answers per training prompt
on tt's batched generator (runtime/rollouts.py), grades them with `tt_stagekit.graders` and updates the LoRA
weights with the clipped GRPO objective (runtime/reinforcement/grpo.py, runtime/reinforcement/train.py). Before the
first step a probe samples a few groups and refuses to start (exit 2) when the graders give zero spread in every
group; after the last step the same groups are sampled again (same seeds) and a mean reward below the probe's (the
SFT adapter's) is said as a warning naming the setting to change first. Checkpoints under `reinforce/checkpoints/` (resumed when the host passes `resume`); the adapter goes to
`reinforce/adapter/` by runtime/adapter_out.publish_adapter, as the train stage's (its tt-adapter.json recording
the tuning: `{"stage": "reinforce", "algorithm": "grpo", <the reinforcement block>, "completed_steps", "from"}`),
returned as an Artifact of kind "adapter". Every prompt that reached a rollout is listed in
`reinforce/rollout-prompts.jsonl` (once: a resume drops the lines after the checkpoint it resumes from, whose steps
sample again).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Mapping

from tt_engine_adapter.runtime import model_source
from tt_engine_adapter.runtime.config import AdapterRequest
from tt_stagekit.contract import Artifact, StageResult
from tt_stagekit.files import append_line
from tt_stagekit.protocol import InvalidInput, StageError, artifact, log, progress, read_request, run_main

model_source.go_offline()

ROLLOUT_LOG = "rollout-prompts.jsonl"


def _graders(spec: Mapping[str, Any]) -> Any:
    """The spec's graders (tt_stagekit.graders: declared in evaluation.graders, else derived from the examples)."""
    from tt_stagekit import graders

    try:
        return graders.from_spec(spec)
    except graders.GraderError as exc:
        raise InvalidInput(str(exc)) from None


def main(request: AdapterRequest) -> StageResult:
    rs = request.spec.reinforcement
    if rs is None:
        raise InvalidInput("reinforcement: the spec has no reinforcement block; this stage has nothing to do")
    from tt_engine_adapter.runtime import chat, loop, manifest
    from tt_engine_adapter.runtime.adapter_out import publish_adapter, save_weights, tuning_record
    from tt_engine_adapter.runtime.data import read_jsonl
    from tt_engine_adapter.runtime.reinforcement import train as reinforcement
    from tt_engine_adapter.runtime.reinforcement.prompts import held_out_users, training_prompts
    from tt_engine_adapter.runtime.rollouts import Generator

    hp, stage_dir = request.hp, request.stage_dir
    sft = request.output("train", "adapter")
    if sft is None:
        raise StageError("the train stage has not completed in this run; GRPO starts from its adapter")
    base = model_source.resolved(request)
    device = model_source.pick_device(request)
    tokenizer = model_source.load_tokenizer(base["path"])
    outputs = request.prepared
    held_out_rows = [r for split in ("validation", "test") if outputs.get(split) for r in read_jsonl(outputs[split])]
    prompts = training_prompts(tokenizer, read_jsonl(outputs["train"]), request.system_message,
                               hp.max_seq_length - rs.max_new_tokens,
                               held_out_users(request.eval_prompts, held_out_rows))
    graders = _graders(read_request(None)["spec"])  # the graders' entries are read as the spec's JSON
    names = ", ".join(g.name for g in graders.graders)

    import torch
    from peft import PeftModel

    torch.manual_seed(hp.seed)
    model = model_source.load_model(base["path"], device, torch.float32)
    model = PeftModel.from_pretrained(model, sft, is_trainable=True)
    padding_choice = chat.padding(tokenizer)
    generator = Generator(model, chat.stop_ids(tokenizer), padding_choice.id, device, rs.rollout_batch_size)
    rollout_log = stage_dir / ROLLOUT_LOG
    checkpoints = stage_dir / "checkpoints"
    if not request.resume:
        shutil.rmtree(checkpoints, ignore_errors=True)
        rollout_log.unlink(missing_ok=True)

    def record(step: int, prompt: Any) -> None:
        append_line(rollout_log, json.dumps({"step": step, "id": prompt.id, "prompt": prompt.user}))

    def rewind(step: int) -> None:
        """On resume, cut the log after the lines of the restored checkpoint's step (all of it without one: the
        probe runs again); the steps after it sample again and log their prompts again. A torn last line goes too.
        A truncation, not a rewrite: a kill before it leaves the log for the next resume to cut."""
        if not rollout_log.exists():
            return
        keep = 0
        for line in rollout_log.read_bytes().splitlines(keepends=True) if step else []:
            try:
                if not line.endswith(b"\n") or json.loads(line)["step"] > step:
                    break
            except (ValueError, KeyError, TypeError):
                break
            keep += len(line)
        with open(rollout_log, "r+b") as handle:
            handle.truncate(keep)
            os.fsync(handle.fileno())

    rollouts = reinforcement.Rollouts(generator, tokenizer, rs, hp.seed, graders.reward, record)

    def run_probe() -> dict:
        try:
            probed = reinforcement.probe(rollouts, prompts, rs, names)
        finally:  # a regex grader past its time limit scored 0: said before the probe's verdict
            if note := graders.timeout_note():
                log(note, "warning")
        log(f"probe: {probed['groups']} group(s) of {rs.group_size}: mean reward {probed['reward']}, "
            f"{probed['zero_std_groups']} with zero spread; training starts")
        return probed

    def on_step(step: int, total: int, stats: dict) -> None:
        if step % hp.log_interval_steps == 0 or step == total:
            progress(step, total, "step", {key: round(stats[key], 6) for key in
                                           ("reward", "reward_std", "loss", "kl", "clip_ratio", "answer_tokens",
                                            "rollout_seconds")})

    log(f"GRPO from {sft}: {len(prompts)} training prompts, {rs.steps} steps of {rs.prompts_per_step} prompts × "
        f"{rs.group_size} answers on {device}; graders: {names}")
    state = reinforcement.train(model, prompts, rollouts, rs, seed=hp.seed, micro_batch=hp.batch_size,
                                pad_id=padding_choice.id, device=device,
                                checkpoints=loop.Checkpoints(checkpoints, request.fingerprint,
                                                             hp.checkpoint_interval_steps, hp.keep_checkpoints),
                                resume=request.resume, on_step=on_step, before_first_step=run_probe, rewind=rewind)
    check = reinforcement.recheck(rollouts, prompts, rs, state.probe) if state.probe else None
    if check:
        log(f"probe rows after step {state.step}: mean reward {check['before']} (SFT) → {check['after']}")
        if check["worse"]:
            log(reinforcement.worse_note(check, rs, state.step), "warning")
    series = {f"reinforce.{key}": values for key, values in state.series.items()}
    last = {key: values[-1][1] for key, values in state.series.items() if values}
    metrics = {
        "reinforce.steps": state.step,
        "reinforce.reward": last.get("reward"),
        "reinforce.reward_std": last.get("reward_std"),
        "reinforce.first_reward": state.series["reward"][0][1] if state.series["reward"] else None,
        "reinforce.kl": last.get("kl"),
        "reinforce.seconds": round(state.seconds, 3),
        "reinforce.rollout_seconds": round(state.rollout_seconds, 3),
        "reinforce.rollout_tokens_per_second": round(state.rollout_tokens / max(state.rollout_seconds, 1e-9), 2),
        **({"reinforce.probe_reward": state.probe["reward"]} if state.probe else {}),
        **({"reinforce.probe_reward_after": check["after"]} if check else {}),
        "reinforce.grader_timeouts": sum(graders.timeouts().values()),
    }
    if note := graders.timeout_note():
        log(note, "warning")
    graders.close()
    metrics = {k: v for k, v in metrics.items() if v is not None}

    adapter_dir = stage_dir / "adapter"
    publish_adapter(request, base, tokenizer, padding_choice, adapter_dir, lambda tmp: save_weights(model, tmp),
                    metrics, tuning_record("reinforce", rs, state.step, sft))
    artifact("adapter", adapter_dir)
    log(f"adapter saved to {adapter_dir} (reward {metrics.get('reinforce.first_reward')} at step 1, "
        f"{metrics.get('reinforce.reward')} at step {state.step})")
    return StageResult(metrics=metrics, series=series,
                       outputs={"adapter": str(adapter_dir), "rollout_prompts": str(rollout_log)},
                       artifacts=(Artifact(kind="adapter", path=str(adapter_dir), manifest=manifest.MANIFEST),))


if __name__ == "__main__":
    run_main(main, request_type=AdapterRequest)
