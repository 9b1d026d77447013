"""Bad dataset rows and corpora: refused with file:line, never a traceback or a hang.

The shared readers are tested directly (tt_stagekit.chatrows, the adapter's
prebuilt datasets, the general-regression set, the foundation corpus) and
through `tt validate` (the spec field and the file:line in one error).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from badinput_support import error_locs, general_set_refusal, in_process_tt, snapshot
from conftest import write_spec
from tt_engine_adapter.formats import rows
from tt_engine_foundation.formats import shards
from tt_engine_foundation.runtime import corpus
from tt_host.spec.general import GeneralSetError, read_general_set
from tt_stagekit.protocol import InvalidInput, StageError

GOOD = json.dumps({"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}]})
BAD_LINES = {
    "not UTF-8": b'{"messages": [{"role": "user", "content": "caf\xe9"}]}',
    "digits": b'{"id": ' + b"7" * 5000 + b', "messages": []}',
    "nested deeper": b'{"messages": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    "duplicate key": b'{"messages": [], "messages": []}',
}


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


def _dataset(path: Path, bad: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(GOOD.encode() + b"\n" + bad + b"\n")
    return path


@pytest.mark.parametrize("what", sorted(BAD_LINES))
def test_shared_readers_name_file_and_line(tmp_path, what):
    path = _dataset(tmp_path / "d.jsonl", BAD_LINES[what])
    with pytest.raises(rows.RowError, match=f"^{path}:2: .*{what}"):
        rows.read_chat_jsonl(path, "train")
    with pytest.raises(GeneralSetError, match=f"^{path}:2: .*{what}"):
        read_general_set(path, None)


@pytest.mark.parametrize("what", sorted(BAD_LINES))
def test_validate_names_the_field_and_file_line(tt_in, tmp_path, what):
    message = general_set_refusal(tt_in, tmp_path, GOOD.encode() + b"\n" + BAD_LINES[what] + b"\n")
    assert "general.jsonl:2: " in message and what in message, message


def test_fifo_or_folder_as_dataset_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "d.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "dir.jsonl").mkdir()
    for path, kind in ((fifo, "named pipe"), (tmp_path / "dir.jsonl", "a folder")):
        with pytest.raises(rows.RowError, match=kind):
            rows.read_chat_jsonl(path, "train")
        with pytest.raises(GeneralSetError, match=kind):
            read_general_set(path, None)


def _foundation_spec(folder: Path, corpus_path: str) -> Path:
    spec = {"name": "f", "engine": "foundation", "system_prompt": "Answer.",
            "examples": [{"input": f"q{i}", "output": f"a{i}"} for i in range(4)],
            "foundation": {"corpus_path": corpus_path}}
    return write_spec(folder, spec)


def _corpus_refused(tt_in, spec: Path, root: Path, text: str) -> None:
    before = snapshot(root)
    code, out = tt_in.json("validate", spec)
    assert code == 2 and error_locs(out) == ["foundation.corpus_path"] and text in out["errors"][0]["msg"], out
    assert snapshot(root) == before


def test_symlink_anywhere_in_a_corpus_path(tt_in, tmp_path):
    real = tmp_path / "real" / "texts"
    real.mkdir(parents=True)
    (real / "a.txt").write_text("some text\n")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "data").symlink_to(tmp_path / "real")
    spec = _foundation_spec(tmp_path / "s", "data/texts/a.txt")
    _corpus_refused(tt_in, spec, tmp_path, "symbolic link")
    spec = _foundation_spec(tmp_path / "s", str(tmp_path / "s" / "data" / "texts"))
    _corpus_refused(tt_in, spec, tmp_path, "symbolic link")


def test_empty_corpus_is_refused(tt_in, tmp_path):
    (tmp_path / "s" / "c").mkdir(parents=True)
    (tmp_path / "s" / "c" / "a.txt").write_text("")
    (tmp_path / "s" / "c" / "b.jsonl").write_text('\n  \n{"text": ""}\n')
    _corpus_refused(tt_in, _foundation_spec(tmp_path / "s", "c"), tmp_path, "no text")
    _corpus_refused(tt_in, _foundation_spec(tmp_path / "s", "c/a.txt"), tmp_path, "no text")


def test_fifo_in_a_corpus_is_refused_before_reading(tt_in, tmp_path):
    (tmp_path / "s" / "c").mkdir(parents=True)
    (tmp_path / "s" / "c" / "a.txt").write_text("text\n")
    os.mkfifo(tmp_path / "s" / "c" / "b.txt")
    _corpus_refused(tt_in, _foundation_spec(tmp_path / "s", "c"), tmp_path, "named pipe")
    with pytest.raises(InvalidInput, match="named pipe"):
        shards.list_shards(tmp_path / "s" / "c")
    with pytest.raises(InvalidInput, match="named pipe"):
        shards.list_shards(tmp_path / "s" / "c" / "b.txt")


@pytest.mark.parametrize("what", ["not UTF-8", "digits", "nested deeper"])
def test_corpus_jsonl_rows_name_file_and_line(tmp_path, what):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "fine"}\n' + BAD_LINES[what].replace(b'"messages"', b'"text"') + b"\n")
    with pytest.raises(StageError, match=f"^{path}:2: "):
        list(corpus.iter_shard(path))
