"""Stage `train`: LoRA fine-tuning of the base model on the prepared rows.

Writes checkpoints under `train/checkpoints/` (resumed when the host passes
`resume`), then the PEFT adapter (`adapter_config.json`,
`adapter_model.safetensors`), `tt-adapter.json` (how prompts are rendered)
and `artifact-manifest.json` to `train/adapter/`, listed in the result's
`artifacts` so the host verifies and registers it at once; when a tuning stage follows (tuning.py) that
stage's adapter is the run's model and this one is only its starting point, not registered.
With hyperparameters.nproc_per_node × nnodes > 1 the plugin starts this module
under torchrun (DistributedDataParallel, or FSDP2 with hyperparameters.sharding
"fsdp": runtime/sharding.py); the first rank of each node writes the adapter
(whole tensors, gathered from every rank's shard) and the result, global rank 0
the checkpoints.
"""

from __future__ import annotations

import shutil

from tt_engine_adapter.runtime import model_source
from tt_engine_adapter.runtime.config import AdapterRequest
from tt_stagekit.contract import Artifact, StageResult
from tt_stagekit.protocol import InvalidInput, artifact, log, progress, run_main, speaks

model_source.go_offline()


def main(request: AdapterRequest) -> StageResult:
    from tt_engine_adapter.runtime import batches, chat, checkpoint, manifest, memory, sharded_load, sharding
    from tt_engine_adapter.runtime.adapter_out import publish_adapter, save_weights
    from tt_engine_adapter.formats.tuning import final_adapter_stage
    from tt_stagekit import distributed
    from tt_engine_adapter.runtime.train import Evaluation, mean_loss, train, wrap_lora
    from tt_engine_adapter.runtime.data import encode_rows, read_jsonl

    hp = request.hp
    stage_dir = request.stage_dir
    base = model_source.resolved(request)
    device = distributed.init(model_source.pick_device(request))
    dtype = model_source.pick_dtype(device, hp.precision)
    tokenizer = model_source.load_tokenizer(base["path"])
    outputs = request.prepared
    rows = encode_rows(tokenizer, read_jsonl(outputs["train"]), hp.max_seq_length, hp.train_on_turns)
    validation = encode_rows(tokenizer, read_jsonl(outputs["validation"]), hp.max_seq_length, hp.train_on_turns) \
        if outputs.get("validation") else []
    padding_choice = chat.padding(tokenizer)
    pad = padding_choice.id

    import torch

    torch.manual_seed(hp.seed)
    if sharding.active(hp):  # built on the meta device, each rank reading its shard of the weights
        model = sharded_load.load(base["path"], device, memory.load_dtype(dtype, hp), hp)
    else:
        model = model_source.load_model(base["path"], device, memory.load_dtype(dtype, hp), hp.load_in_4bit)
        model = wrap_lora(memory.prepare_base(model, hp), hp)
    refused = hp.packing and batches.packing_refused(model.config)
    if refused:  # rows packed into one sequence would see each other in this architecture's layers
        raise InvalidInput(refused)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log(f"LoRA r={hp.lora_rank} on {hp.target_modules}: {trainable} trainable parameters; "
        f"{len(rows)} rows on {device} ({str(dtype).replace('torch.', '')}"
        + (", 4-bit NF4 base" if hp.load_in_4bit else "") + (", gradient checkpointing" if hp.gradient_checkpointing
                                                              else "") + ")"
        + (f" with {distributed.context().world_size} processes ({distributed.context().backend})" if distributed.context().enabled else ""))
    checkpoints = stage_dir / "checkpoints"
    if not request.resume and distributed.context().is_main:
        shutil.rmtree(checkpoints, ignore_errors=True)

    def on_step(step: int, total: int, loss: float, lr: float, tps: float) -> None:
        if step % hp.log_interval_steps == 0 or step == total:
            progress(step, total, "step", {"loss": round(loss, 6), "lr": lr, "tokens_per_second": round(tps, 1)})

    autocast = dtype if dtype != torch.float32 else None
    evaluation = None
    if hp.eval_interval_steps:
        if not validation:
            raise InvalidInput("hyperparameters.eval_interval_steps: this run has no validation rows; give "
                               "datasets.validation, or unset it")
        evaluation = Evaluation(
            measure=lambda: mean_loss(model, validation, hp.batch_size, pad, device, autocast),
            on_best=lambda step, loss: _keep_best(checkpoints, step, loss, model))
    state = train(model, rows, hp, pad_id=pad, device=device, autocast_dtype=autocast,
                  checkpoint_dir=checkpoints, stage_fingerprint=request.fingerprint,
                  resume=request.resume, on_step=on_step, evaluation=evaluation,
                  scaler=memory.grad_scaler(device, dtype))
    padding = state.padding
    fed = padding["tokens"] + padding["pad_tokens"]
    log(f"{padding['pad_tokens']} pad tokens fed beside {padding['tokens']} row tokens "
        f"({100 * padding['pad_tokens'] / max(fed, 1):.1f}% of the batches)"
        + (f"; plain padding would have fed {padding['pad_tokens_unpacked']}" if hp.packing else ""))
    metrics = {
        "train.final_loss": state.losses[-1][1] if state.losses else None,
        "train.steps": state.step,
        "train.tokens_per_second": round(state.tokens / max(state.seconds, 1e-9), 2),
        "train.seconds": round(state.seconds, 3),
        "train.trainable_parameters": trainable,
        "train.world_size": distributed.context().world_size,
        "train.sharded_bytes_per_rank": state.held_bytes,
        "train.peak_host_bytes_per_node": sharding.peak_host_bytes_per_node(),
        "train.peak_device_bytes_per_rank": sharding.peak_device_bytes_per_rank(device),
        "train.pad_tokens": padding["pad_tokens"],
        "train.pad_tokens_unpacked": padding["pad_tokens_unpacked"] if hp.packing else None,
    }
    adapter_dir = stage_dir / "adapter"
    whole = sharding.full_trainable_state(model)  # a sharded model's LoRA gathered from every rank (a collective)
    if state.best_step is None and validation and sharding.is_sharded(model):  # every rank joins its forward
        metrics["train.validation_loss"] = round(mean_loss(model, validation, hp.batch_size, pad, device, autocast), 6)
    if not speaks():  # the node's first rank writes the adapter and the result
        return StageResult(metrics=metrics, outputs={"adapter": str(adapter_dir)})
    if state.best_step is not None:  # evaluation during training: the best step's adapter is the one registered
        metrics.update({"train.validation_loss": round(state.best_loss, 6), "train.best_step": state.best_step,
                        "train.stopped_early": int(state.stopped_early)})
    elif validation and "train.validation_loss" not in metrics:
        metrics["train.validation_loss"] = round(
            mean_loss(model, validation, hp.batch_size, pad, device, autocast), 6)
    metrics = {k: v for k, v in metrics.items() if v is not None}

    def write_weights(tmp) -> None:
        if state.best_step is not None:
            shutil.copytree(checkpoints / checkpoint.BEST, tmp, ignore=shutil.ignore_patterns("best.json"))
        else:
            save_weights(model, tmp, whole)

    publish_adapter(request, base, tokenizer, padding_choice, adapter_dir, write_weights, metrics)
    outputs = {"adapter": str(adapter_dir), "padding": padding_choice.record()}
    if final_adapter_stage(request.spec) != "train":  # a tuning stage follows: its adapter is the run's model
        log(f"adapter saved to {adapter_dir} (final loss {metrics.get('train.final_loss')}); the "
            f"{final_adapter_stage(request.spec)} stage tunes it further and registers the result")
        return StageResult(metrics=metrics, series=_series(state), outputs=outputs)
    artifact("adapter", adapter_dir)
    log(f"adapter saved to {adapter_dir} (final loss {metrics.get('train.final_loss')}"
        + (f"; the best step {state.best_step} by validation loss" if state.best_step is not None else "") + ")")
    return StageResult(
        metrics=metrics,
        series=_series(state),
        outputs=outputs,
        artifacts=(Artifact(kind="adapter", path=str(adapter_dir), manifest=manifest.MANIFEST),),
    )


def _keep_best(checkpoints, step: int, loss: float, model) -> None:
    """Every rank: the best step's adapter so far, written by the node's first rank (whole, when sharded)."""
    from tt_engine_adapter.runtime import checkpoint, sharding

    whole = sharding.full_trainable_state(model)
    if speaks():
        checkpoint.save_best(checkpoints, step, loss, model, whole)


def _series(state) -> dict:
    return {"train.loss": state.losses, **({"train.validation_loss": state.validation} if state.validation else {})}


if __name__ == "__main__":
    run_main(main, request_type=AdapterRequest)
