"""Stage `pretrain`: train the GPT from scratch on the token cache, with recoverable checkpoints.

Resumes from the newest intact checkpoint whose config fingerprint matches
(local, then `checkpoint_backup_dir`); refuses changed settings before any
file changes. Writes the final model to `<run>/pretrain/model/`.
With world size > 1 the plugin starts this module under torchrun; every rank
runs `main`, the first rank of each node writes the model and the result.
"""

from __future__ import annotations

from tt_stagekit import protocol
from tt_stagekit.contract import Artifact, InvalidInput, StageResult
from tt_stagekit.files import file_sha256
from tt_stagekit.manifest import MANIFEST

from tt_engine_foundation.runtime.config import FoundationRequest, pretrain_learning_rate


def main(request: FoundationRequest) -> StageResult:
    from tt_engine_foundation.runtime import checkpoints
    from tt_stagekit import distributed
    from tt_engine_foundation.runtime import token_cache
    from tt_engine_foundation.runtime import tokenizer
    from tt_engine_foundation.runtime.chat import check_fits
    from tt_engine_foundation.runtime.model import config_for_depth
    from tt_engine_foundation.runtime.model_io import save_model_dir
    from tt_engine_foundation.runtime.pretrain import read_series, run_pretraining, training_config
    from tt_engine_foundation.runtime.torchsetup import open_stage

    cfg = request.cfg
    lay = request.layout
    _refuse_misplaced_backup(request)  # exit 2 before the device, the data or any step
    device, tok = open_stage(request, distributed=True)
    check_fits(tok, cfg.sequence_length, request.system_message, request.answers)  # sequence_length may have changed since the tokenizer stage: exit 2 before training
    tokens, packing_table, manifest = token_cache.open_training_data(cfg, lay)
    model_cfg = config_for_depth(cfg.depth, cfg.vocab_size, cfg.sequence_length, cfg.qk_norm, **tokenizer.special_ids(tok))
    peak_lr = pretrain_learning_rate(cfg)
    data = {"token_cache_sha256": manifest["file"]["sha256"], "tokenizer_sha256": file_sha256(lay.tokenizer_json)}
    config = training_config(cfg, model_cfg, peak_lr, data)
    fingerprint = checkpoints.config_fingerprint(config)
    backup_dir = cfg.checkpoint_backup_dir / request.run_dir.name if cfg.checkpoint_backup_dir is not None else None
    world = distributed.context().world_size
    protocol.log(
        f"pretraining depth {cfg.depth} (width {model_cfg.hidden_size}, {model_cfg.num_attention_heads} heads) "
        f"for {cfg.pretrain_steps} steps at peak lr {peak_lr:.3g} on {device}"
        + (f" with {world} processes ({distributed.context().backend})" if world > 1 else "")
    )
    model, state, figures = run_pretraining(
        cfg=cfg, model_cfg=model_cfg, tokens=tokens, device=device, peak_lr=peak_lr, config=config,
        fingerprint=fingerprint, checkpoint_dir=lay.checkpoints, backup_dir=backup_dir, heartbeat_path=lay.heartbeats,
        packing_table=packing_table,
    )
    model_dir = lay.model_dir("pretrain")
    if protocol.speaks():
        save_model_dir(
            model_dir, model, lay.tokenizer_json, "foundation-base",
            # A base model is not tuned to any instruction: it carries no system message (so editing the
            # spec's instruction later leaves it valid for `tt serve` and for foundation.init_model).
            {"stage": "pretrain", "config_fingerprint": fingerprint, "system_message_sha256": ""},
        )
    params = model.num_params()
    metrics = {
        "pretrain.final_loss": state.last_loss,
        "pretrain.tokens_per_second": figures["tokens_per_second"],
        "pretrain.steps": state.step,
        "pretrain.tokens_seen": state.tokens_seen,
        "pretrain.parameters": params,
        "pretrain.learning_rate": peak_lr,
        "pretrain.world_size": world,
    }
    if "document_start_share" in figures:  # bos_aligned packing: the share of rows that begin a document
        metrics["pretrain.document_start_share"] = figures["document_start_share"]
        metrics["pretrain.rows_per_epoch"] = figures["rows_per_epoch"]
    notes = [checkpoints.kept_line(lay.checkpoints)]
    if cfg.corpus_path is None:
        notes.append("pretrained on the smoke corpus built from the spec: it proves the wiring, not capability")
    if figures["resumed_from"]:
        notes.append(f"pretraining resumed from {figures['resumed_from']}")
    return StageResult(
        metrics=metrics,
        series={"pretrain.loss": read_series(lay.heartbeats, state.step)},
        outputs={"model": str(model_dir), "checkpoint": str(lay.checkpoints / checkpoints.step_name(state.step)),
                 "config_fingerprint": fingerprint},
        artifacts=(Artifact(kind="foundation-base", path=str(model_dir), manifest=MANIFEST),),
        notes=tuple(notes),
    )


def _refuse_misplaced_backup(request: FoundationRequest) -> None:
    """foundation.checkpoint_backup_dir inside this run's checkpoints, the run folder or $TT_HOME/runs: exit 2
    (formats/backup.py). The spec refused the folders it could see before the run existed."""
    from tt_engine_foundation.formats import backup

    folder = request.cfg.checkpoint_backup_dir
    if folder is None:
        return
    places = (("the run's checkpoints folder", request.layout.checkpoints), ("the run folder", request.run_dir),
              ("$TT_HOME's runs folder", backup.tt_home_runs()))
    refusal = backup.misplaced(folder, places)
    if refusal:
        raise InvalidInput(refusal)


if __name__ == "__main__":
    protocol.run_main(main, request_type=FoundationRequest)
