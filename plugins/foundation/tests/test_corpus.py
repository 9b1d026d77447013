"""Item 5 (runtime side): corpus formats, deterministic max_chars, bad rows named by file and line."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tt_engine_foundation.formats.shards import list_shards
from tt_engine_foundation.runtime.corpus import iter_documents
from tt_stagekit.protocol import InvalidInput, StageError


def _texts(path, max_chars=None):
    return [d.text for d in iter_documents(list_shards(path), max_chars)]


def test_folder_of_mixed_shards_is_sorted_and_recursive(tmp_path):
    root = tmp_path / "corpus"
    (root / "b").mkdir(parents=True)
    (root / "a.txt").write_text("para one\nline two\n\npara two\n")
    (root / "b" / "c.jsonl").write_text(json.dumps({"text": "json row"}) + "\n\n" + json.dumps({"text": "second"}) + "\n")
    pq.write_table(pa.table({"text": ["pq one", "pq two"], "other": [1, 2]}), root / "b" / "d.parquet")
    (root / "notes.md").write_text("ignored: not a shard type")
    (root / ".hidden.txt").write_text("ignored: hidden")
    assert [p.name for p in list_shards(root)] == ["a.txt", "c.jsonl", "d.parquet"]
    assert _texts(root) == ["para one\nline two", "para two", "json row", "second", "pq one", "pq two"]


def test_max_chars_is_a_deterministic_bound(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": "x" * 10 + str(i)}) + "\n" for i in range(10)))
    first = _texts(path, 25)
    assert first == _texts(path, 25)
    assert sum(len(t) for t in first) == 25
    assert first == ["x" * 10 + "0", "x" * 10 + "1", "xxx"]


def test_upper_case_suffixes_are_shards(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "A.TXT").write_text("upper text\n")
    (root / "b.JSONL").write_text(json.dumps({"text": "upper json"}) + "\n")
    (root / "c.Md").write_text("not a shard")
    assert [p.name for p in list_shards(root)] == ["A.TXT", "b.JSONL"]
    assert _texts(root) == ["upper text", "upper json"]
    assert [p.name for p in list_shards(root / "A.TXT")] == ["A.TXT"]


def test_a_cut_is_reported_with_the_first_document_left_out(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": "x" * 10}) + "\n" for _ in range(3)))
    cuts = []
    assert sum(len(d.text) for d in iter_documents(list_shards(path), 25, cuts.append)) == 25
    assert [(c.source, c.line) for c in cuts] == [(str(path), 3)]  # the third row was cut
    cuts.clear()
    assert len(list(iter_documents(list_shards(path), 20, cuts.append))) == 2
    assert [c.line for c in cuts] == [3]  # two whole rows fit exactly; the third was left out
    cuts.clear()
    list(iter_documents(list_shards(path), 30, cuts.append))
    assert cuts == []  # everything fits: nothing to report


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"text": "ok"}\n{"text": "bad\n', "bad.jsonl:2: malformed JSON"),
        (b'{"text": "ok"}\n{"body": "no text"}\n', 'bad.jsonl:2: row has no "text" field'),
        (b'{"text": "ok"}\n\n{"text": 5}\n', 'bad.jsonl:3: row has a "text" that is not a string'),
        (b'{"text": "ok"}\n{"text": "caf\xe9"}\n', "bad.jsonl:2: not UTF-8"),
        (b'["a list"]\n', "bad.jsonl:1: row is not a JSON object"),
    ],
)
def test_bad_jsonl_rows_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(StageError) as err:
        _texts(path)
    assert message in str(err.value)


def test_undecodable_txt_names_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\n\xff\xfe broken\n")
    with pytest.raises(StageError, match=r"bad.txt:3: not UTF-8"):
        _texts(path)


def test_parquet_without_text_column_or_with_nulls(tmp_path):
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "a.parquet")
    with pytest.raises(StageError, match="no 'text' column"):
        _texts(tmp_path / "a.parquet")
    pq.write_table(pa.table({"text": ["x", None]}), tmp_path / "b.parquet")
    with pytest.raises(StageError, match=r"b.parquet: row 2: 'text' is not a string"):
        _texts(tmp_path / "b.parquet")


def test_links_missing_and_empty_folders_are_refused(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("text\n")
    os.symlink(real, tmp_path / "link.txt")
    with pytest.raises(InvalidInput, match="symbolic link"):
        list_shards(tmp_path / "link.txt")
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(InvalidInput, match="no corpus shards"):
        list_shards(folder)
    os.symlink(real, folder / "inner.txt")
    with pytest.raises(InvalidInput, match="symbolic links are refused"):
        list_shards(folder)
    with pytest.raises(InvalidInput, match="no such file"):
        list_shards(tmp_path / "missing.jsonl")
