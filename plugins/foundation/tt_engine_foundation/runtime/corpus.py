"""Corpus reading in the engine environment: .txt, .jsonl (string `text`), .parquet (`text` column) and
folders of them.

Shards are found by `formats.shards.list_shards` (sorted, recursive, no links,
FIFOs or devices: the listing the host validated and fingerprinted). Documents stream one at a
time (bounded memory) and `max_chars` is a deterministic upper bound over the
sorted shards: the document that crosses the bound is cut, and the caller hears
of the cut (`on_cut`) so it can say so.
Bad data raises `StageError` naming the file and line (or parquet row).

A `.txt` shard yields one document per paragraph (blank-line separated); a
paragraph longer than `TXT_CHUNK_CHARS` is cut at line boundaries.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

from tt_stagekit.chatrows import parsed_lines
from tt_stagekit.files import file_sha256
from tt_stagekit.protocol import StageError

from tt_engine_foundation.formats.shards import list_shards

TXT_CHUNK_CHARS = 1 << 16
PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class Document:
    text: str
    source: str  # file path, or "<smoke>"
    line: int  # 1-based line (txt/jsonl) or row (parquet) where the document starts


def describe_shards(shards: Sequence[Path], root: Optional[Path] = None) -> list[dict[str, Any]]:
    """File list with sizes and sha256, for manifests and fingerprints."""
    out = []
    for shard in shards:
        name = shard.relative_to(root).as_posix() if root and root.is_dir() else shard.name
        out.append({"path": name, "size": shard.stat().st_size, "sha256": file_sha256(shard)})
    return out


def _decode(raw: bytes, source: Path, line: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StageError(f"{source}:{line}: not UTF-8 (undecodable byte at column {exc.start + 1}); save the file "
                         "as UTF-8") from None


def _iter_txt(path: Path) -> Iterator[Document]:
    lines: list[str] = []
    size = 0
    start = 1
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            text = _decode(raw, path, number)
            if not text.strip():
                if lines:
                    yield Document("".join(lines).rstrip("\n"), str(path), start)
                lines, size = [], 0
                start = number + 1
                continue
            if not lines:
                start = number
            lines.append(text)
            size += len(text)
            if size >= TXT_CHUNK_CHARS:
                yield Document("".join(lines), str(path), start)
                lines, size = [], 0
                start = number + 1
    if lines:
        yield Document("".join(lines).rstrip("\n"), str(path), start)


def _iter_jsonl(path: Path) -> Iterator[Document]:
    # Streamed line by line through the stagekit's row parser (the same UTF-8 and JSON rules as dataset rows).
    with open(path, "rb") as handle:
        for number, _, row in parsed_lines(handle, path, StageError):
            if not isinstance(row, dict):
                raise StageError(f"{path}:{number}: row is not a JSON object")
            value = row.get("text")
            if not isinstance(value, str):
                what = "has no \"text\" field" if "text" not in row else "has a \"text\" that is not a string"
                raise StageError(f"{path}:{number}: row {what}")
            if value:
                yield Document(value, str(path), number)


def _iter_parquet(path: Path) -> Iterator[Document]:
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for bad files
        raise StageError(f"{path}: not a readable parquet file ({exc})") from None
    if "text" not in reader.schema_arrow.names:
        raise StageError(f"{path}: parquet file has no 'text' column (columns: {', '.join(reader.schema_arrow.names)})")
    row = 0
    for batch in reader.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=["text"]):
        for value in batch.column(0).to_pylist():
            row += 1
            if not isinstance(value, str):
                raise StageError(f"{path}: row {row}: 'text' is not a string")
            if value:
                yield Document(value, str(path), row)


def iter_shard(path: Path) -> Iterator[Document]:
    suffix = path.suffix.lower()
    if suffix == ".txt":
        return _iter_txt(path)
    if suffix == ".jsonl":
        return _iter_jsonl(path)
    return _iter_parquet(path)


OnCut = Callable[[Document], None]


def truncate(docs: Iterable[Document], max_chars: Optional[int], on_cut: Optional[OnCut] = None) -> Iterator[Document]:
    """The documents in order, cut deterministically once `max_chars` characters have been given.

    When text is left out, `on_cut(doc)` is called once with the first document not given in full.
    """
    total = 0
    docs = iter(docs)
    for doc in docs:
        if max_chars is not None and total + len(doc.text) >= max_chars:
            rest = max_chars - total
            if rest > 0:
                yield Document(doc.text[:rest], doc.source, doc.line)
            if on_cut is not None:
                left = doc if rest < len(doc.text) else next(docs, None)
                if left is not None:
                    on_cut(left)
            return
        total += len(doc.text)
        yield doc


def iter_documents(shards: Iterable[Path], max_chars: Optional[int] = None,
                   on_cut: Optional[OnCut] = None) -> Iterator[Document]:
    """Documents across sorted shards, cut deterministically at max_chars in total."""
    return truncate((doc for shard in shards for doc in iter_shard(shard)), max_chars, on_cut)


def smoke_documents(system_message: str, train_rows: Sequence[Mapping[str, Any]]) -> list[Document]:
    """The small corpus built from the spec's instruction and training examples.

    It proves the wiring, not capability. Held-out rows never enter it.
    """
    docs = [Document(system_message, "<smoke>", 1)]
    for index, row in enumerate(train_rows, start=2):
        parts = [m["content"] for m in row.get("messages", []) if m.get("role") in ("user", "assistant")]
        if parts:
            docs.append(Document("\n".join(parts), "<smoke>", index))
    return docs


def smoke_digest(docs: Sequence[Document]) -> str:
    digest = hashlib.sha256()
    for doc in docs:
        digest.update(doc.text.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


def tokenizer_source(corpus_path: Optional[Path], system_message: str,
                      train_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Shard names and sizes without reading the data (the tokenizer's record of its source)."""
    if corpus_path is not None:
        shards = list_shards(corpus_path)
        base = corpus_path if corpus_path.is_dir() else corpus_path.parent
        return {"kind": "corpus", "path": str(corpus_path), "shards": [s.relative_to(base).as_posix() for s in shards]}
    return {"kind": "smoke", "sha256": smoke_digest(smoke_documents(system_message, train_rows))}


def run_corpus(corpus_path: Optional[Path], system_message: str, train_rows: Sequence[Mapping[str, Any]]):
    """(shards or None, smoke documents or None, description for manifests)."""
    if corpus_path is not None:
        shards = list_shards(corpus_path)
        return shards, None, {"kind": "corpus", "path": str(corpus_path), "files": describe_shards(shards, corpus_path)}
    docs = smoke_documents(system_message, train_rows)
    return None, docs, {"kind": "smoke", "sha256": smoke_digest(docs), "documents": len(docs)}


def iter_run_corpus(corpus_path: Optional[Path], system_message: str, train_rows: Sequence[Mapping[str, Any]],
                    max_chars: Optional[int], on_cut: Optional[OnCut] = None) -> Iterator[Document]:
    """The corpus (or smoke corpus) documents, cut at max_chars; `on_cut(doc)` hears of a cut."""
    shards, smoke, _ = run_corpus(corpus_path, system_message, train_rows)
    if shards is not None:
        return iter_documents(shards, max_chars, on_cut)
    return truncate(smoke, max_chars, on_cut)
