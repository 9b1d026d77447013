"""The `foundation` settings the trained weights depend on: one tuple for pretraining, one for SFT.

Stdlib only, read by both sides: the host puts these settings into the stage
fingerprints (plugin.py's pretrain_inputs and sft_inputs, which decide whether a
finished stage is reused on `--resume`), the stages into the checkpoint
fingerprints (runtime/pretrain.py's training_config, runtime/sft.py's
sft_config, which decide whether a saved checkpoint may be resumed). Declared
once, so the two cannot drift apart. Both sides hash JSON with sorted keys, so
the order here only sets the key order of the checkpoint's recorded config.
"""

from __future__ import annotations

# The rate (learning_rate, finetune_learning_rate): the spec's value in the stage fingerprint, the peak
# actually used in the checkpoint's.
PRETRAIN_FIELDS = (
    "depth", "vocab_size", "sequence_length", "learning_rate", "weight_decay", "warmup_steps", "min_lr_ratio",
    "pretrain_steps", "batch_size", "gradient_accumulation_steps", "gradient_clip", "seed", "bf16",
    "optimizer", "lr_schedule", "warmdown_fraction", "packing", "qk_norm",
    "document_start_share", "cpu_bf16",
)

# The derived pretraining rates' batch factor never falls below this (runtime/hyperparams.py). A stage input
# of pretrain when learning_rate is unset (plugin.py), so a finished pretraining made under another rule is
# not reused.
BATCH_SCALE_FLOOR = 1.0

SFT_FIELDS = ("finetune_learning_rate", "finetune_steps", "batch_size", "sequence_length", "weight_decay", "gradient_clip", "seed",
              "bf16", "finetune_corpus_rows", "cpu_bf16")


RATE_FIELDS = ("learning_rate", "finetune_learning_rate")


def used_settings(settings, fields: tuple[str, ...], learning_rate: float) -> dict:
    """`fields` of a stage's `FoundationSettings` as a checkpoint records them: the stage's rate field
    (`RATE_FIELDS`, one per tuple) is the peak used."""
    return {name: learning_rate if name in RATE_FIELDS else getattr(settings, name) for name in fields}
