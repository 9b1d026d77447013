"""Dataset sources of the engine: JSONL, parquet, a `datasets` `save_to_disk` folder or a hub dataset.

Every source yields the same rows as its JSONL equivalent, checked by the same
rules (`tt_engine_adapter.formats.rows`): a bad row is named `file:line` (JSONL) or
`dataset:index` (parquet, datasets folders, hub files; 0-based). Arrow
columns give every row every column, so missing values (`None`) are dropped
before the check. A hub dataset is downloaded at its pinned revision into the
Hugging Face cache (`snapshot_download`, `repo_type="dataset"`; offline with
HF_HUB_OFFLINE=1 the cache alone answers) and its split's parquet or JSONL
files are read from the snapshot. Mixing weights repeat a source's rows
(weight 2: every row twice) or keep a seeded share of them (0.5: half).
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, Iterable, Optional

from tt_engine_adapter.formats.rows import RowError, _check_row, read_chat_jsonl
from tt_stagekit.protocol import StageError, log


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _checked(records: Iterable[Any], name: str, split: str, system: Optional[str], ignored: dict) -> list[dict]:
    out: list[dict] = []
    for index, value in enumerate(records):
        where = f"{name}[{index}]"
        row_id, messages = _check_row(_drop_nulls(value), where, system, ignored)
        out.append({"id": row_id or f"{split}-{Path(name).name}-{index:06d}", "messages": messages, "where": where})
    if not out:
        raise RowError(f"{name}: no rows")
    return out


def _parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # not parquet, damaged
        raise RowError(f"{path}: cannot read as parquet: {type(exc).__name__}: {exc}") from None


def _saved(path: Path) -> list[dict]:
    from datasets import Dataset, load_from_disk

    try:
        data = load_from_disk(str(path))
    except Exception as exc:
        raise RowError(f"{path}: cannot load as a datasets save_to_disk folder: {type(exc).__name__}: {exc}") \
            from None
    if not isinstance(data, Dataset):
        raise RowError(f"{path}: a DatasetDict folder (splits {sorted(data)}); give one split's folder, e.g. "
                       f"{path / sorted(data)[0]}")
    return data.to_list()


def read_local(path: Path, split: str, system: Optional[str], ignored: dict) -> list[dict]:
    """Rows of a local JSONL file, parquet file or save_to_disk folder."""
    if path.is_dir():
        return _checked(_saved(path), str(path), split, system, ignored)
    if path.suffix == ".parquet":
        return _checked(_parquet(path), str(path), split, system, ignored)
    loaded = read_chat_jsonl(path, split, system, ignored)
    return [{"id": r["id"], "messages": r["messages"], "where": f"{path}:{r['line']}"} for r in loaded]


def split_files(snapshot: Path, split: str) -> list[Path]:
    """The parquet or JSONL files of `split` in a hub dataset snapshot (hub naming: `data/train-0000-of-0001.parquet`,
    `train.jsonl`, `train/part-0.parquet`)."""
    found = []
    for path in sorted(p for p in snapshot.rglob("*") if p.suffix in (".parquet", ".jsonl") and p.is_file()):
        rel = path.relative_to(snapshot)
        stem = path.name.split(".")[0]
        if stem == split or stem.startswith(f"{split}-") or split in rel.parts[:-1]:
            found.append(path)
    return found


def hub_snapshot(repo: str, revision: str) -> Path:
    """The cached snapshot of dataset `repo` at `revision`, downloaded once (the cache alone when offline)."""
    from huggingface_hub import constants, snapshot_download

    offline = bool(constants.HF_HUB_OFFLINE)
    try:
        path = Path(snapshot_download(repo_id=repo, repo_type="dataset", revision=revision, local_files_only=offline))
    except Exception as exc:
        hint = ("it is not in the Hugging Face cache and HF_HUB_OFFLINE=1 forbids downloading it; fetch it with "
                f"`hf download {repo} --repo-type dataset --revision {revision}`") if offline else "check the id and revision"
        raise StageError(f"datasets: hub dataset {repo}@{revision}: {type(exc).__name__}: {exc}; {hint}") from None
    log(f"hub dataset {repo}@{revision} at {path}")
    return path


def read_hub(repo: str, revision: str, hub_split: str, split: str, system: Optional[str], ignored: dict) -> list[dict]:
    snapshot = hub_snapshot(repo, revision)
    files = split_files(snapshot, hub_split)
    if not files:
        raise RowError(f"{repo}@{revision}: no parquet or JSONL files for split {hub_split!r} in the snapshot")
    out: list[dict] = []
    for path in files:
        name = f"{repo}@{snapshot.name[:12]}/{path.relative_to(snapshot)}"
        if path.suffix == ".parquet":
            out += _checked(_parquet(path), name, split, system, ignored)
        else:
            from tt_stagekit.chatrows import parsed_lines, read_lines

            _, lines = read_lines(path, RowError)
            records = [value for _, _, value in parsed_lines(lines, name, RowError)]
            out += _checked(records, name, split, system, ignored)
    return out


def weighted(rows: list[dict], weight: float, seed: int) -> list[dict]:
    """`weight` × the rows: whole copies (ids suffixed `#2`, `#3`...) then a seeded share for the fraction."""
    whole = math.floor(weight)
    out = [dict(r, id=r["id"] if copy == 0 else f"{r['id']}#{copy + 1}") for copy in range(whole) for r in rows]
    extra = round((weight - whole) * len(rows))
    if extra:
        picked = sorted(random.Random(seed).sample(range(len(rows)), extra))
        out += [dict(rows[i], id=rows[i]["id"] if whole == 0 else f"{rows[i]['id']}#{whole + 1}") for i in picked]
    return out
