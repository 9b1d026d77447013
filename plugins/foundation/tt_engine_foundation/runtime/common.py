"""Shared helpers for stages: run-directory layout, device choice, the foundation config."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_stagekit.devices import pick_device


@dataclass(frozen=True)
class Layout:
    """Where a run's files live. With `init_model` (SFT/RL from an existing foundation model) the
    tokenizer and the base model are that model folder's, and nothing is pretrained in the run."""

    run_dir: Path
    init_model: Optional[Path] = None

    @property
    def tokenizer_dir(self) -> Path:
        return self.run_dir / "tokenizer"

    @property
    def tokenizer_json(self) -> Path:
        if self.init_model is not None:
            return self.init_model / "tokenizer.json"
        return self.tokenizer_dir / "tokenizer.json"

    @property
    def base_model(self) -> Path:
        """The model SFT starts from: this run's pretrained model, or `init_model`."""
        return self.init_model if self.init_model is not None else self.model_dir("pretrain")

    @property
    def recovery(self) -> Path:
        return self.run_dir / "pretrain" / "recovery"

    @property
    def tokens_bin(self) -> Path:
        return self.recovery / "pretrain-tokens.bin"

    @property
    def tokens_manifest(self) -> Path:
        return self.recovery / "pretrain-tokens.manifest.json"

    @property
    def checkpoints(self) -> Path:
        return self.recovery / "checkpoints"

    @property
    def heartbeats(self) -> Path:
        return self.recovery / "training-metrics.jsonl"

    @property
    def sft_checkpoints(self) -> Path:
        return self.run_dir / "sft" / "recovery" / "checkpoints"

    def model_dir(self, stage: str) -> Path:
        return self.run_dir / stage / "model"


def layout(request: Mapping[str, Any]) -> Layout:
    init = fconfig(request).get("init_model")
    return Layout(Path(request["run_dir"]), Path(init) if init else None)


def fconfig(request: Mapping[str, Any]) -> dict[str, Any]:
    return dict(request["spec"].get("foundation") or {})


def resolve_device(requested: str):
    import torch

    return torch.device(pick_device(requested))


def request_device(request: Mapping[str, Any]):
    return resolve_device(request.get("device") or fconfig(request).get("device") or "auto")


def setup_threads() -> None:
    """Per-process torch settings: thread count (TT_NUM_THREADS) and flush-to-zero for denormals.

    Denormal floats (tiny Adam second moments, small activations) slow CPU math
    by an order of magnitude; flushing them is deterministic.
    """
    import torch

    torch.set_flush_denormal(True)
    value = os.environ.get("TT_NUM_THREADS")
    if value:
        torch.set_num_threads(max(1, int(value)))


def stage_output(request: Mapping[str, Any], stage: str, key: str) -> Optional[str]:
    entry = (request.get("stages") or {}).get(stage)
    if not entry:
        return None
    return ((entry.get("result") or {}).get("outputs") or {}).get(key)


def learning_rate(cfg: Mapping[str, Any], model=None) -> float:
    """The spec's learning_rate, else derived from the width: of `model` when given (SFT and RL, whose
    model may come from `init_model`), else of `depth`."""
    from tt_engine_foundation.runtime.model import ASPECT_RATIO, derived_learning_rate

    value = cfg.get("learning_rate")
    if value is not None:
        return float(value)
    depth = model.cfg.hidden_size // ASPECT_RATIO if model is not None else int(cfg["depth"])
    return derived_learning_rate(depth)


def tokenizer_source(request: Mapping[str, Any]) -> dict[str, Any]:
    """What the tokenizer was trained on, without reading the data: the corpus shard names, or the smoke text digest."""
    from tt_engine_foundation.runtime.corpus import list_shards, smoke_digest, smoke_documents

    corpus = fconfig(request).get("corpus_path")
    if corpus:
        root = Path(corpus)
        shards = list_shards(root)
        base = root if root.is_dir() else root.parent
        return {"kind": "corpus", "path": str(root), "shards": [s.relative_to(base).as_posix() for s in shards]}
    docs = smoke_documents(request.get("system_message", ""), request.get("train_rows") or [])
    return {"kind": "smoke", "sha256": smoke_digest(docs)}


def corpus_source(request: Mapping[str, Any]):
    """(shards or None, smoke documents or None, description for manifests)."""
    from tt_engine_foundation.runtime.corpus import describe_shards, list_shards, smoke_digest, smoke_documents

    cfg = fconfig(request)
    corpus = cfg.get("corpus_path")
    if corpus:
        root = Path(corpus)
        shards = list_shards(root)
        return shards, None, {"kind": "corpus", "path": str(root), "files": describe_shards(shards, root)}
    docs = smoke_documents(request.get("system_message", ""), request.get("train_rows") or [])
    return None, docs, {"kind": "smoke", "sha256": smoke_digest(docs), "documents": len(docs)}


def iter_corpus(request: Mapping[str, Any], max_chars: Optional[int], on_cut=None):
    """The corpus (or smoke corpus) documents, cut at max_chars; `on_cut(doc)` hears of a cut."""
    from tt_engine_foundation.runtime.corpus import iter_documents, truncate

    shards, smoke, _ = corpus_source(request)
    if shards is not None:
        return iter_documents(shards, max_chars, on_cut)
    return truncate(smoke, max_chars, on_cut)


def checkpoints_exist(lay: Layout) -> bool:
    from tt_engine_foundation.runtime.checkpoint import list_steps

    return bool(list_steps(lay.checkpoints))


def load_tokenizer(request: Mapping[str, Any]):
    from tt_engine_foundation.runtime import tokenizer as T
    from tt_stagekit.protocol import StageError

    lay = layout(request)
    if not lay.tokenizer_json.is_file():
        raise StageError(f"{lay.tokenizer_json}: tokenizer is missing; run the tokenizer stage first")
    return T.load(lay.tokenizer_json)


def special_ids(tok) -> dict[str, int]:
    from tt_engine_foundation.runtime import tokenizer as T

    return {
        "bos_token_id": T.special_id(tok, T.BOS),
        "eos_token_id": T.special_id(tok, T.ASSISTANT_END),
        "pad_token_id": T.special_id(tok, T.PAD),
    }


def model_config(request: Mapping[str, Any], tok):
    from tt_engine_foundation.runtime.model import config_for_depth

    cfg = fconfig(request)
    return config_for_depth(int(cfg["depth"]), int(cfg["vocab_size"]), int(cfg["sequence_length"]), **special_ids(tok))


def autocast_dtype(request: Mapping[str, Any], device):
    import torch

    return torch.bfloat16 if fconfig(request).get("bf16") and device.type == "cuda" else None
