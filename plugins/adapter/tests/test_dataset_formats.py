"""Dataset rows users have: multi-turn chats, prompt/completion rows, extra keys (ignored, counted once)."""

from __future__ import annotations

import json

import pytest

from tt_engine_adapter.formats import rows

SYSTEM = "Classify the sentiment of the review."
CHATS = [
    {"id": "a", "messages": [{"role": "user", "content": "the film was great"},
                             {"role": "assistant", "content": "positive"}]},
    {"id": "b", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "the plot?"},
                             {"role": "assistant", "content": "let me look"}, {"role": "tool", "content": "dull"},
                             {"role": "assistant", "content": "negative"}]},
]


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _plain(loaded):
    return [{"id": r["id"], "messages": r["messages"]} for r in loaded]


def test_prompt_completion_and_extra_keys_give_the_same_rows(tmp_path):
    reference = _plain(rows.read_chat_jsonl(_write(tmp_path / "chat.jsonl", CHATS), "train", SYSTEM))
    assert [m["role"] for m in reference[1]["messages"]] == ["user", "assistant", "tool", "assistant"]
    other = [
        {"id": "a", "prompt": "the film was great", "completion": "positive", "source": "imdb", "score": 3},
        {"id": "b", "prompt": CHATS[1]["messages"][:4], "completion": CHATS[1]["messages"][4:], "source": "x"},
    ]
    ignored: dict = {}
    assert _plain(rows.read_chat_jsonl(_write(tmp_path / "pc.jsonl", other), "train", SYSTEM, ignored)) == reference
    assert ignored == {"source": 2, "score": 1}


@pytest.mark.parametrize("row, message", [
    ({"prompt": "x"}, "needs 'completion'"),
    ({"messages": [{"role": "user", "content": "x"}], "prompt": "x", "completion": "y"}, "not both"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                   {"role": "user", "content": "z"}]}, "ending with an assistant answer"),
    ({"messages": [{"role": "assistant", "content": "y"}, {"role": "user", "content": "x"},
                   {"role": "assistant", "content": "y"}]}, "starting with a user message"),
    ({"messages": [{"role": "critic", "content": "x"}]}, "role must be system, user, assistant or tool"),
])
def test_bad_rows_name_file_and_line(tmp_path, row, message):
    path = _write(tmp_path / "bad.jsonl", [CHATS[0], row])
    with pytest.raises(rows.RowError, match=f"^{tmp_path}/bad.jsonl:2: .*{message}"):
        rows.read_chat_jsonl(path, "train", SYSTEM)


def _load(tmp_path, train):
    from tt_engine_adapter.runtime import config, data

    spec = config.AdapterSpecFields(base_model=str(tmp_path), datasets=config.DatasetSplits(train=train))
    return [{"id": r["id"], "messages": r["messages"]} for r in data.load_prebuilt(spec, SYSTEM)["train"]]


def test_parquet_datasets_folder_and_hub_snapshot_give_the_jsonl_rows(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset
    from huggingface_hub import constants

    from tt_engine_adapter.runtime.config import DatasetSource

    reference = _load(tmp_path, _write(tmp_path / "chat.jsonl", CHATS))
    # arrow gives every message every field: the tool turn's missing keys come back as None and are dropped
    table = pa.Table.from_pylist(CHATS)
    pq.write_table(table, tmp_path / "chat.parquet")
    assert _load(tmp_path, tmp_path / "chat.parquet") == reference
    Dataset.from_list(CHATS).save_to_disk(str(tmp_path / "saved"))
    assert _load(tmp_path, tmp_path / "saved") == reference
    # a hub dataset at a pinned branch, answered by an offline Hugging Face cache (no hub is reachable)
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "datasets--tt-test--chats"
    (repo / "snapshots" / commit / "data").mkdir(parents=True)
    pq.write_table(table, repo / "snapshots" / commit / "data" / "train-00000-of-00001.parquet")
    pq.write_table(table.slice(0, 1), repo / "snapshots" / commit / "data" / "test-00000-of-00001.parquet")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub = _load(tmp_path, DatasetSource(hub="tt-test/chats", revision="main", split="train"))
    assert [r["messages"] for r in hub] == [r["messages"] for r in reference]
    # mixing weights: the hub rows twice, half the JSONL rows (seeded)
    mixed = _load(tmp_path, (DatasetSource(hub="tt-test/chats", revision="main", weight=2.0),
                             DatasetSource(path=tmp_path / "chat.jsonl", weight=0.5)))
    assert len(mixed) == 5 and len({r["id"] for r in mixed}) == 5


def test_bad_parquet_row_names_dataset_and_index(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tt_stagekit.protocol import InvalidInput

    pq.write_table(pa.Table.from_pylist([CHATS[0], {"id": "x", "messages": [{"role": "user", "content": "hi"}]}]),
                   tmp_path / "bad.parquet")
    with pytest.raises(InvalidInput, match=rf"bad.parquet\[1\]: .*ending with an assistant answer"):
        _load(tmp_path, tmp_path / "bad.parquet")
