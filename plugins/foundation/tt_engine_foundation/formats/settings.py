"""The foundation's settings, each declared once: name, type, default, bounds and help (both processes read this).

`FoundationSettings` is the spec's `foundation` block: the stages parse a request into it (runtime/config.py,
`tt_stagekit.stageconfig`) and the host derives its strict `FoundationConfig` from it (spec.py, through
`tt_host.api.settings_model`), adding the rules between settings and the checks of the paths there.
`FoundationSpecFields` is the engine's top-level keys of the spec (`examples` and `evaluation` are the neutral
spec's). The help is the spec's JSON schema description; docs/foundation.md's table is checked against the
defaults (tests/host/engine_specs/test_settings_docs.py). Stdlib and tt_stagekit only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Optional

from tt_stagekit.benchmarks import Evaluation
from tt_stagekit.launcher import DistributedSettings
from tt_stagekit.settings import TextPath, setting
from tt_stagekit.stageconfig import Example

MIN_VOCAB = 264  # 256 byte symbols + 8 chat special tokens


@dataclass(frozen=True)
class FoundationSettings(DistributedSettings):
    """`spec.foundation`: every knob of the engine (docs/foundation.md); the torchrun settings from `DistributedSettings`.

    The learning-rate rules that read these settings are runtime/config.py's (they need the model's width)."""

    corpus_path: Optional[Path] = setting(None, help="Pretraining text: .txt, .jsonl (text), .parquet (text) or a folder of them. Unset: the smoke corpus from the spec.")
    validation_path: Optional[Path] = setting(None, help="Held-out text for BPB, same formats; must differ from corpus_path.")
    checkpoint_backup_dir: Optional[Path] = setting(None, help="Second folder that receives a copy of every checkpoint; "
                                                    "outside the run folder, its checkpoints and $TT_HOME/runs (best on "
                                                    "another disk).")
    depth: int = setting(4, ge=1, le=64, help="Transformer layers; width = 64 * depth, one head per 64 channels.")
    vocab_size: int = setting(8192, ge=MIN_VOCAB, le=262_144, help="BPE vocabulary size including the 8 special tokens.")
    tokenizer_max_chars: int = setting(10_000_000, ge=1_000, le=100_000_000_000, help="Corpus characters the tokenizer trains on.")
    max_chars: int = setting(1_000_000_000, ge=1_000, le=10_000_000_000_000, help="Upper bound of corpus characters in the token cache (first over the sorted shards).")
    bpb_max_chars: int = setting(4_000_000, ge=1_000, le=10_000_000_000_000, help="Characters of held-out text the bpb stage measures (first over the sorted shards); a cut is reported.")
    init_model: Optional[TextPath] = setting(None, help="Start SFT (and RL) from this existing foundation model: a registered model id, a model folder, or a run directory (its pretrained base). No tokenizer, token cache, pretraining or BPB stage runs.")
    pretrain_steps: int = setting(1000, ge=1, le=100_000_000)
    sequence_length: int = setting(512, ge=16, le=32_768)
    batch_size: int = setting(8, ge=1, le=4_096, help="Sequences per micro-batch.")
    gradient_accumulation_steps: int = setting(1, ge=1, le=4_096)
    learning_rate: Optional[float] = setting(None, gt=0, le=1.0, help="Pretraining's peak rate: with optimizer muon, Muon's matrix rate (AdamW's groups scale with it); with adamw, AdamW's. Unset: derived (docs/foundation.md). SFT and RL use finetune_learning_rate.")
    finetune_learning_rate: Optional[float] = setting(None, gt=0, le=1.0, help="SFT's peak AdamW rate (RL runs at a fifth of it), linear decay to zero. Unset: 1e-3 * sqrt(768 / width).")
    weight_decay: float = setting(0.1, ge=0.0, le=1.0)
    warmup_steps: int = setting(20, ge=0, le=10_000_000)
    min_lr_ratio: float = setting(0.1, ge=0.0, le=1.0, help="The rate at the end of pretraining, as a fraction of the peak (both schedules).")
    optimizer: Literal["muon", "adamw"] = setting("muon", help="Pretraining optimizer: muon (Muon on the decoder's matrices, AdamW on embedding, head and norms; rates derived from width and tokens per step) or adamw (AdamW everywhere, tt's earlier trainer).")
    lr_schedule: Literal["warmdown", "cosine"] = setting("warmdown", help="Pretraining schedule after warm-up: warmdown (peak held, then linear to min_lr_ratio over the last warmdown_fraction of the steps) or cosine (to min_lr_ratio).")
    packing: Literal["bos_aligned", "stream"] = setting("bos_aligned", help="Pretraining rows: bos_aligned (whole documents packed best-fit, every row starting at a <|bos|>, long documents split into BOS-started chunks, nothing cut) or stream (windows anywhere in the concatenated corpus).")
    qk_norm: bool = setting(False, help="Qwen3's per-head RMSNorm on queries and keys before the rotary embedding; the model exports as Qwen3ForCausalLM (GGUF: llama.cpp's qwen3) instead of Llama.")
    document_start_share: float = setting(0.0, ge=0.0, lt=1.0, help="With packing bos_aligned: the share of each epoch's rows that begin at a document's first token. Rows that start a document are repeated to reach it (every row still comes once); 0 leaves each row once per epoch. On long documents most rows are later chunks, so this weighs beginnings (after a <|bos|>) up.")
    warmdown_fraction: float = setting(0.5, gt=0.0, le=1.0, help="Share of pretraining steps the warmdown schedule spends decaying.")
    gradient_clip: float = setting(1.0, ge=0.0, le=1_000.0, help="Max gradient norm; 0 disables clipping.")
    bf16: bool = setting(True, help="bf16 autocast on CUDA (ignored on CPU/MPS).")
    cpu_bf16: bool = setting(False, help="bf16 autocast for pretraining and SFT steps on a CPU that multiplies bf16 natively (AMX or AVX-512 BF16; about 1.5x the tokens/s of float32 there). Scoring and generation stay float32. Refused on other CPUs, where bf16 is slower than float32.")
    checkpoint_interval_steps: int = setting(100, ge=0, le=100_000_000, help="0 disables step-based checkpoints.")
    checkpoint_interval_seconds: float = setting(1800.0, ge=0.0, le=31_536_000.0, help="0 disables time-based checkpoints.")
    keep_checkpoints: int = setting(3, ge=1, le=10_000)
    log_interval_steps: int = setting(10, ge=1, le=1_000_000)
    seed: int = setting(1337, ge=0, le=2**31 - 1)
    finetune_steps: int = setting(100, ge=0, le=10_000_000)
    finetune_corpus_rows: int = setting(0, ge=0, le=4_096, help="Rows of the pretraining token cache added to every SFT step (replay): the step's loss is the chat loss plus the next-token loss on these rows, so SFT keeps what pretraining taught while it learns the chat form. 0: SFT trains on chat rows only. Needs this run's token cache, so not with init_model.")
    rl_steps: int = setting(0, ge=0, le=10_000_000)
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    compile: bool = setting(False, help="torch.compile the model for pretraining.")
    sft_datasets: tuple[Path, ...] = setting((), max_length=64, help="Chat JSONL files (messages or prompt/completion rows, multi-turn) that SFT trains on besides the spec's training examples.")
    gradient_checkpointing: bool = setting(False, help="Recompute each layer's activations in the backward pass (pretraining and SFT): less memory, about a third more compute, same results.")

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.gradient_accumulation_steps * self.sequence_length


@dataclass(frozen=True)
class FoundationSpecFields:
    """The parts of the spec the foundation's stages read (the engine-neutral rest is the host's)."""

    extra_keys: ClassVar[str] = "ignore"

    foundation: FoundationSettings = setting(default_factory=FoundationSettings)
    examples: tuple[Example, ...] = ()
    evaluation: Optional[Evaluation] = None
