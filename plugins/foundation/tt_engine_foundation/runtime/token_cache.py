"""The pretraining token cache: the corpus encoded once, streaming, into a flat binary file.

Documents are encoded in batches with `Tokenizer.encode_batch`, each prefixed
by `<|bos|>`, and appended as little-endian uint16 (uint32 when the vocabulary
needs it) to a temporary file that is renamed into place. Memory is bounded by
the batch size, whatever the corpus size. The manifest records the sources
(sizes, sha256), the tokenizer hash, the token count, dtype and the file's own
sha256; `verify` checks a cache against it before use.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional

import numpy as np

from tt_engine_foundation.runtime.corpus import Document
from tt_stagekit.files import atomic_file, atomic_write_json, file_sha256
from tt_stagekit.protocol import StageError

BATCH_CHARS = 1 << 20  # ~1M characters per encode_batch call


def dtype_for(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def _batches(docs: Iterable[Document], batch_chars: int) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for doc in docs:
        batch.append(doc.text)
        size += len(doc.text)
        if size >= batch_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def build(
    docs: Iterable[Document],
    tok,
    bos_id: int,
    out_path: Path,
    dtype: np.dtype,
    batch_chars: int = BATCH_CHARS,
    on_progress=None,
) -> dict[str, Any]:
    """Encode docs into out_path atomically; returns {tokens, bytes, sha256, chars, documents}."""
    digest = hashlib.sha256()
    tokens = chars = documents = 0
    with atomic_file(out_path) as handle:
        for batch in _batches(docs, batch_chars):
            encodings = tok.encode_batch(batch, add_special_tokens=False)
            count = sum(len(e.ids) for e in encodings) + len(encodings)
            flat = np.fromiter(
                itertools.chain.from_iterable(itertools.chain((bos_id,), e.ids) for e in encodings),
                dtype=dtype,
                count=count,
            )
            data = flat.tobytes()
            digest.update(data)
            handle.write(data)
            tokens += count
            documents += len(batch)
            chars += sum(len(t) for t in batch)
            if on_progress is not None:
                on_progress(tokens, chars, documents)
    return {"tokens": tokens, "bytes": tokens * dtype.itemsize, "sha256": digest.hexdigest(), "chars": chars, "documents": documents}


def write_manifest(path: Path, inputs: Mapping[str, Any], built: Mapping[str, Any], dtype: np.dtype) -> None:
    atomic_write_json(
        path,
        {
            "format": 1,
            "inputs": dict(inputs),
            "token_count": built["tokens"],
            "dtype": dtype.str,
            "file": {"size": built["bytes"], "sha256": built["sha256"]},
            "documents": built["documents"],
            "chars": built["chars"],
            "cut_at": built.get("cut_at"),  # file:line of the first text max_chars left out (None: nothing)
            "packing": built.get("packing"),  # the BOS-aligned plan's summary and file hash (None: stream windows)
        },
    )


def read_manifest(path: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def verify(bin_path: Path, manifest: Mapping[str, Any]) -> None:
    """Raise StageError unless bin_path matches the manifest's size and sha256."""
    if not bin_path.is_file():
        raise StageError(f"{bin_path}: token cache is missing")
    size = bin_path.stat().st_size
    expected = manifest["file"]["size"]
    if size != expected:
        raise StageError(f"{bin_path}: token cache is {size} bytes, its manifest says {expected}")
    if file_sha256(bin_path) != manifest["file"]["sha256"]:
        raise StageError(f"{bin_path}: token cache does not match the sha256 in its manifest")


def verify_packing(path: Path, manifest: Mapping[str, Any]) -> None:
    """Raise StageError unless the packing plan matches the manifest's record."""
    record = manifest.get("packing")
    if not record:
        raise StageError(f"{path}: the token cache was built without BOS-aligned packing; rerun the token_cache stage")
    if not path.is_file() or path.stat().st_size != record["file"]["size"] or file_sha256(path) != record["file"]["sha256"]:
        raise StageError(f"{path}: the packing plan is missing or does not match its manifest; rerun the token_cache stage")


def open_tokens(bin_path: Path, manifest: Mapping[str, Any]) -> np.ndarray:
    return np.memmap(bin_path, dtype=np.dtype(manifest["dtype"]), mode="r")


def open_training_data(cfg, layout) -> tuple[np.ndarray, Optional[np.ndarray], dict[str, Any]]:
    """The run's verified token cache (FoundationSettings `cfg`, config.Layout `layout`): (tokens, the
    BOS-aligned packing table or None with `packing: stream`, the manifest). Pretraining and SFT replay
    read it this way; a missing or changed cache is a failed stage that says which stage to rerun."""
    manifest = read_manifest(layout.tokens_manifest)
    if manifest is None:
        raise StageError(f"{layout.tokens_manifest}: token cache manifest is missing; run the token_cache stage")
    verify(layout.tokens_bin, manifest)
    tokens = open_tokens(layout.tokens_bin, manifest)
    if cfg.packing != "bos_aligned":
        return tokens, None, manifest
    from tt_engine_foundation.runtime import packing

    verify_packing(layout.tokens_packing, manifest)
    if manifest["packing"]["row_tokens"] != cfg.sequence_length + 1:
        raise StageError(f"{layout.tokens_packing}: packed for rows of {manifest['packing']['row_tokens']} "
                         "tokens, not sequence_length + 1; rerun the token_cache stage")
    return tokens, packing.read_table(layout.tokens_packing, manifest["packing"]["chunks"]), manifest


class Windows:
    """Deterministic sample order: non-overlapping windows of seq+1 tokens, reshuffled per epoch from the seed."""

    def __init__(self, tokens: np.ndarray, sequence_length: int, seed: int) -> None:
        self.tokens = tokens
        self.seq = sequence_length
        self.count = (len(tokens) - 1) // sequence_length
        if self.count < 1:
            raise StageError(
                f"the token cache holds {len(tokens)} tokens, fewer than sequence_length + 1 = {sequence_length + 1}; "
                "use a larger corpus or a smaller foundation.sequence_length"
            )
        self.seed = seed
        self._epoch = -1
        self._perm: Optional[np.ndarray] = None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.count)
            self._epoch = epoch
        assert self._perm is not None
        return self._perm

    def batch(self, start_sample: int, batch_size: int) -> np.ndarray:
        """(batch_size, seq+1) int64 array for samples start_sample .. start_sample+batch_size-1."""
        rows = np.empty((batch_size, self.seq + 1), dtype=np.int64)
        for i in range(batch_size):
            sample = start_sample + i
            window = int(self._permutation(sample // self.count)[sample % self.count])
            begin = window * self.seq
            rows[i] = self.tokens[begin : begin + self.seq + 1]
        return rows

    def targets(self, start_sample: int, batch_size: int) -> int:
        """How many targets those samples score: all of them (a window has no padding)."""
        return batch_size * self.seq
