"""The foundation engine's plugin module: what the host needs, nothing heavy.

Registers the `foundation` engine (spec model, ordered stages with what each
reads, for their fingerprints; doctor checks and disk estimate from
`doctor.py`; runtime project). Imports pydantic, tt_host
and the stdlib only; torch lives in the engine environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from tt_host.api import SERVE_EXPORT, SERVE_HF, Engine, Export, ModelKind, PipelineVocabulary, Stage, hookimpl

from tt_stagekit.files import file_sha256
from tt_stagekit.launcher import stage_arguments
from tt_engine_foundation.doctor import disk_needs, doctor_checks
from tt_engine_foundation.formats import pretokenizer
from tt_engine_foundation.formats.shards import list_shards
from tt_engine_foundation.formats.weights import BATCH_SCALE_FLOOR, PRETRAIN_FIELDS, SFT_FIELDS
from tt_engine_foundation.spec import FoundationSpec
from tt_stagekit.manifest import MANIFEST

_DIGESTS: dict[tuple[str, int, int], str] = {}


def _sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = file_sha256(path)
    return _DIGESTS[key]


def corpus_digest(path: Optional[Path]) -> Optional[list[dict[str, Any]]]:
    """The sorted shard list with sizes and sha256 (None when unset)."""
    if path is None:
        return None
    try:
        shards = list_shards(path)
    except Exception as exc:  # surfaced properly by validation; keep fingerprints total
        return [{"error": str(exc)}]
    root = path if path.is_dir() else path.parent
    return [{"path": s.relative_to(root).as_posix(), "size": s.stat().st_size, "sha256": _sha256(s)} for s in shards]


def _f(spec: FoundationSpec) -> Mapping[str, Any]:
    return spec.foundation.model_dump(mode="json")


def _pick(spec: FoundationSpec, *names: str, **computed: Any) -> dict[str, Any]:
    """Inputs as {"foundation": {name: value}}, so a refusal names the setting (`foundation.depth`)."""
    f = _f(spec)
    return {"foundation": {**{name: f[name] for name in names}, **computed}}


def corpus_names(path: Optional[Path]) -> Optional[list[str]]:
    """The sorted shard names only: fixing a bad row later must not invalidate a finished tokenizer."""
    if path is None:
        return None
    try:
        shards = list_shards(path)
    except Exception as exc:
        return [f"error: {exc}"]
    root = path if path.is_dir() else path.parent
    return [s.relative_to(root).as_posix() for s in shards]


def model_digest(path: Optional[str]) -> Optional[dict[str, str]]:
    """An init_model folder by its path and the sha256 of its manifest (which lists every file's sha256)."""
    if path is None:
        return None
    manifest = Path(path) / MANIFEST
    return {"path": path, "manifest_sha256": _sha256(manifest) if manifest.is_file() else "missing"}


# What each stage reads. Without corpus_path the smoke corpus is built from the instruction and the
# examples, so then the tokenizer, token cache and pretraining do read them (reads_spec_text); with a
# corpus, nothing before SFT does, and a changed example re-runs SFT onward only. Without
# validation_path BPB is measured on the smoke text, so it reads them too.

def _smoke_corpus(spec: FoundationSpec) -> bool:
    return spec.foundation.corpus_path is None


def _smoke_validation(spec: FoundationSpec) -> bool:
    return spec.foundation.validation_path is None


def _pretrains(spec: FoundationSpec) -> bool:
    return spec.foundation.init_model is None


def tokenizer_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    # The corpus *content* is fingerprinted by token_cache; here only its shard names, so a malformed row
    # fixed after the tokenizer finished lets the run resume (the tokenizer is lossless on any text).
    # init_model is here so that a run directory that pretrained refuses to switch to another model.
    return _pick(spec, "vocab_size", "tokenizer_max_chars", "init_model",
                 corpus_path=corpus_names(spec.foundation.corpus_path), pre_tokenizer=pretokenizer.PRE_TOKENIZER)


def token_cache_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    # packing and sequence_length: the BOS-aligned plan the stage writes beside the cache depends on them
    return _pick(spec, "max_chars", "packing", "sequence_length", corpus_path=corpus_digest(spec.foundation.corpus_path))


def pretrain_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    if spec.foundation.learning_rate is not None or spec.foundation.optimizer == "adamw":  # nothing batch-derived
        return _pick(spec, *PRETRAIN_FIELDS)
    return _pick(spec, *PRETRAIN_FIELDS, derived_rates={"batch_scale_floor": BATCH_SCALE_FLOOR})


def bpb_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    return _pick(spec, "sequence_length", "batch_size", "bpb_max_chars",
                 validation_path=corpus_digest(spec.foundation.validation_path))


def sft_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    return _pick(spec, *SFT_FIELDS, init_model=model_digest(spec.foundation.init_model),
                 sft_datasets=[{"path": str(p), "sha256": _sha256(p)} for p in spec.foundation.sft_datasets])


def rl_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    return _pick(spec, "rl_steps", "sequence_length", "batch_size", "finetune_learning_rate", "gradient_clip", "seed",
                 "bf16")


def chat_eval_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    return _pick(spec, "sequence_length", "rl_steps", "bf16")


def baseline_inputs(spec: FoundationSpec) -> Mapping[str, Any]:
    """chat_eval's settings and what decides the base model: the tokenizer, token cache and pretraining inputs
    (or init_model's digest). The fingerprint chains pretrain's anyway; these are for the cross-run baseline
    cache's hint (tt_host.evaluation.baseline_cache), which omits earlier results, so that `tt run --dry-run`
    never predicts reusing a base evaluation made with another pretraining (another depth, say)."""
    if spec.foundation.init_model is not None:
        base: Mapping[str, Any] = {"init_model": model_digest(spec.foundation.init_model)}
    else:
        base = {"tokenizer": tokenizer_inputs(spec), "token_cache": token_cache_inputs(spec),
                "pretrain": pretrain_inputs(spec)}
    return {**chat_eval_inputs(spec), "base_model": base}


def _rl_enabled(spec: FoundationSpec) -> bool:
    return spec.foundation.rl_steps > 0


def _launch(module: str):
    """Stage.launch for the training stages: torchrun when nproc_per_node × nnodes > 1."""
    def launch(spec: FoundationSpec) -> list[str]:
        return stage_arguments(_f(spec), module)
    return launch


STAGES = (
    Stage("tokenizer", "tt_engine_foundation.stages.tokenizer", inputs=tokenizer_inputs, needs=(),
          reads_spec_text=_smoke_corpus, enabled=_pretrains, gets_train_rows=True,
          description="train the byte-level BPE tokenizer"),
    Stage("token_cache", "tt_engine_foundation.stages.token_cache", inputs=token_cache_inputs, needs=("tokenizer",),
          reads_spec_text=_smoke_corpus, enabled=_pretrains, gets_train_rows=True,
          description="encode the corpus into the token cache"),
    Stage("pretrain", "tt_engine_foundation.stages.pretrain", inputs=pretrain_inputs, needs=("token_cache",),
          reads_spec_text=lambda spec: False, enabled=_pretrains,
          launch=_launch("tt_engine_foundation.stages.pretrain"), description="pretrain the GPT with recoverable checkpoints"),
    Stage("bpb", "tt_engine_foundation.stages.bpb", inputs=bpb_inputs, needs=("pretrain",),
          reads_spec_text=_smoke_validation, enabled=_pretrains, replaceable=True, gets_train_rows=True,
          description="held-out bits per byte"),
    Stage("sft", "tt_engine_foundation.stages.sft", inputs=sft_inputs, needs=("pretrain",), replaceable=True,
          gets_train_rows=True, gets_synthetic_rows=True, launch=_launch("tt_engine_foundation.stages.sft"),
          description="chat SFT on the training rows"),
    Stage("rl", "tt_engine_foundation.stages.rl", inputs=rl_inputs, needs=("sft",), replaceable=True, enabled=_rl_enabled,
          gets_train_rows=True, description="on-policy RL with exact-answer rewards"),
    Stage("chat_eval", "tt_engine_foundation.stages.chat_eval", inputs=chat_eval_inputs, needs=("rl",), replaceable=True,
          evaluates="chat_eval", gets_train_rows=True, general="candidate", benchmarks=True,
          description="generate answers for the held-out prompts"),
    # The base model (pretrained, before SFT; init_model when given) answers the held-out prompts (the run's
    # base side: base → tuned in its verdict) and, with a gate, the general-regression set and the lm-eval
    # benchmarks as the gate's baseline (docs/evaluation.md). Last, so that adding it changed no earlier
    # fingerprint.
    Stage("general_baseline", "tt_engine_foundation.stages.chat_eval", inputs=baseline_inputs, needs=("pretrain",),
          replaceable=True, evaluates="baseline", gets_train_rows=True, general="baseline", benchmarks=True,
          description="the base model (before SFT) on the held-out prompts, and the gate's baseline"),
)


# The Hugging Face folder tt_engine_foundation.stages.export writes (its EXPORT_KIND); tt serve loads it through an
# engine whose server reads Hugging Face folders.
HF_EXPORT = Export("tt_engine_foundation.stages.export", "foundation-hf")
# GGUF for llama.cpp, and GGUF + Modelfile for Ollama (tt_engine_foundation.stages.export_gguf); not served by tt
QUANTS = ("f16", "bf16", "q8_0", "q4_0", "f32")
FORMATS = {"gguf": Export("tt_engine_foundation.stages.export_gguf", "foundation-gguf", QUANTS),
           "ollama": Export("tt_engine_foundation.stages.export_gguf", "foundation-ollama", QUANTS)}

# Best first: a run's final model is its RL model, else its SFT model, else its pretrained base.
MODEL_KINDS = (
    ModelKind("foundation-rl", "rl/model", serve=SERVE_EXPORT, export=HF_EXPORT, formats=FORMATS),
    ModelKind("foundation-sft", "sft/model", serve=SERVE_EXPORT, export=HF_EXPORT, formats=FORMATS),
    ModelKind("foundation-base", "pretrain/model", serve=SERVE_EXPORT, export=HF_EXPORT, base=True,
              formats=FORMATS),
    ModelKind("foundation-hf", serve=SERVE_HF, info_file="tt-export.json"),
)

STARTER = {"foundation": {"corpus_path": "TODO: pretraining text: a .txt, .jsonl or .parquet file, or a folder of them"}}


def spec_device(spec: FoundationSpec) -> str:
    return spec.foundation.device


def doctor(spec: Optional[FoundationSpec], device: str):
    """tt doctor's checks (doctor.py), torch asked in this engine's environment."""
    return doctor_checks(ENGINE, spec, device)


# Pipeline v1's from-scratch vocabulary (`runtime.engine: "foundation"` documents): each step's stages, and the
# spec field that decides each `with` setting a document may carry (the spec wins; a difference is a warning).
PIPELINE_VOCABULARY = PipelineVocabulary(
    runtime="foundation",
    steps={"tokenize": ("tokenizer", "token_cache"), "pretrain": ("pretrain",), "finetune": ("sft",),
           "rl": ("rl",), "bpb": ("bpb",), "chat": ("chat_eval", "general_baseline"), "inference": ("chat_eval",)},
    settings={"tokenize": {"vocabSize": "vocab_size", "maxChars": "tokenizer_max_chars"},
              "pretrain": {"depth": "depth", "steps": "pretrain_steps", "batchSize": "batch_size",
                           "sequenceLength": "sequence_length", "nprocPerNode": "nproc_per_node"},
              "finetune": {"steps": "finetune_steps", "batchSize": "batch_size"},
              "rl": {"steps": "rl_steps"}},
    block="foundation",
)

ENGINE = Engine(
    name="foundation",
    spec_model=FoundationSpec,
    stages=STAGES,
    # In a clone the environment is synced from the project (pyproject.toml + uv.lock); an installed
    # wheel has no project and ships its runtime as a lock (written by scripts/export-runtime-locks).
    runtime_project=Path(__file__).resolve().parents[1],
    runtime_lock=Path(__file__).resolve().parent / "pylock.runtime.toml",
    description="Train a small Llama-layout GPT from scratch: tokenizer, token cache, pretraining, BPB, SFT, RL, chat eval",
    sync_groups=("runtime",),
    doctor=doctor,
    disk_needs=disk_needs,
    min_examples=2,
    model_kinds=MODEL_KINDS,
    starter=STARTER,
    spec_device=spec_device,
    pipeline_vocabulary=PIPELINE_VOCABULARY,
    stage_server="tt_engine_foundation.stages.warm",  # with TT_STAGE_SERVER=1 (docs/operations.md "Stage server")
    host_api="1.4",
)


@hookimpl
def tt_engines():
    yield ENGINE
