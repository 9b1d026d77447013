"""Stage `sft`: chat fine-tuning of the pretrained model (or `init_model`) on the training rows (assistant tokens only),
with `finetune_corpus_rows` rows of the pretraining token cache replayed in every step (runtime/replay.py).

With world size > 1 the plugin starts it under torchrun (DistributedDataParallel);
the first rank of each node writes the model and the result.
"""

from __future__ import annotations

from tt_stagekit import protocol
from tt_stagekit.contract import Artifact, StageResult
from tt_stagekit.manifest import MANIFEST

from tt_engine_foundation.runtime.config import FoundationRequest, finetune_peak_rate


def sft_rows(request: FoundationRequest) -> list[dict]:
    """The spec's training rows, then every row of `foundation.sft_datasets` led by the compiled system message."""
    from tt_stagekit.chatrows import read_chat_file

    rows = [dict(row) for row in request.train_rows]
    system = request.system_message
    ignored: dict = {}
    for path in request.cfg.sft_datasets:
        try:
            loaded = read_chat_file(path, protocol.InvalidInput, system_message=system, ignored=ignored)
        except protocol.InvalidInput as exc:
            raise protocol.InvalidInput(f"foundation.sft_datasets: {exc}") from None
        for row in loaded:
            body = row["messages"][1:] if row["messages"][0]["role"] == "system" else row["messages"]
            rows.append({"id": row["id"], "messages": [{"role": "system", "content": system}, *body]})
    if ignored:
        protocol.log("foundation.sft_datasets: ignored keys " + ", ".join(f"{k!r} ({n} rows)" for k, n in sorted(ignored.items())),
                     "warning")
    return rows


def main(request: FoundationRequest) -> StageResult:
    from tt_engine_foundation.runtime import tokenizer
    from tt_engine_foundation.runtime.model_io import load_model_dir, save_model_dir
    from tt_engine_foundation.runtime.replay import open_replay
    from tt_engine_foundation.runtime.sft import SftCheckpoints, run_sft, sft_config
    from tt_engine_foundation.runtime.torchsetup import open_stage, training_autocast_dtype
    from tt_stagekit.promptfit import trimmed_note

    device, tok = open_stage(request, distributed=True)
    cfg = request.cfg
    lay = request.layout
    rows = sft_rows(request)
    model = load_model_dir(lay.base_model, device)
    peak_lr = finetune_peak_rate(cfg, model.cfg.hidden_size)
    every = cfg.log_interval_steps
    stats: dict = {}

    def on_step(step: int, total: int, loss: float, lr: float) -> None:
        if step % every == 0 or step == total:
            extra = {"corpus_loss": stats["corpus_loss"]} if "corpus_loss" in stats else {}
            protocol.progress(step, total, "step", {"loss": loss, "lr": lr, **extra})

    replay = open_replay(cfg, lay, tokenizer.special_id(tok, tokenizer.BOS), tokenizer.special_id(tok, tokenizer.PAD))
    protocol.log(f"SFT on {len(rows)} training rows for {cfg.finetune_steps} steps"
                 + (f", replaying {replay.rows} pretraining rows per step" if replay is not None else ""))
    input_model = lay.base_model
    checkpoints = SftCheckpoints(
        directory=lay.sft_checkpoints, config=sft_config(cfg, peak_lr, rows, input_model, replay),
        every_steps=cfg.checkpoint_interval_steps, keep=cfg.keep_checkpoints,
    )
    losses = run_sft(model, tok, rows, cfg, peak_lr, device, training_autocast_dtype(cfg, device),
                     on_step, checkpoints, stats, replay)
    model_dir = lay.model_dir("sft")
    if protocol.speaks():
        save_model_dir(
            model_dir, model, lay.tokenizer_json, "foundation-sft",
            {"stage": "sft", "system_message_sha256": request.system_message_sha256},
        )
    metrics = {"sft.steps": len(losses), "sft.trimmed_rows": stats["trimmed_rows"]}
    if losses:
        metrics["sft.final_loss"] = losses[-1][1]
    if replay is not None:
        metrics["sft.corpus_rows_per_step"] = replay.rows
        if "corpus_loss" in stats:
            metrics["sft.final_corpus_loss"] = stats["corpus_loss"]
    notes = [trimmed_note(stats["trimmed_rows"], len(rows), "SFT training rows", "foundation.sequence_length",
                          cfg.sequence_length)] if stats["trimmed_rows"] else []
    for note in notes:
        protocol.log(note, "warning")
    if lay.init_model is not None:
        notes.append(f"SFT started from the foundation model {lay.init_model} (foundation.init_model): this run has "
                     "no tokenizer, token cache, pretraining or BPB stage of its own")
    return StageResult(
        metrics=metrics,
        notes=tuple(notes),
        # the replayed rows' loss beside the chat loss: whether SFT keeps what pretraining taught (report.html charts it)
        series={"sft.loss": [[s, v] for s, v in losses],
                **({"sft.corpus_loss": [[s, v] for s, v in stats["corpus_losses"]]} if replay is not None else {})},
        outputs={"model": str(model_dir)},
        artifacts=(Artifact(kind="foundation-sft", path=str(model_dir), manifest=MANIFEST),),
    )


if __name__ == "__main__":
    protocol.run_main(main, request_type=FoundationRequest)
