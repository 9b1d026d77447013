"""Token cache: same inputs give the same bytes, manifests verify, data order is a pure function of the seed."""

import json

import numpy as np
import pytest

from tt_engine_foundation.runtime import token_cache as TC
from tt_engine_foundation.runtime import tokenizer as T
from tt_engine_foundation.formats.shards import list_shards
from tt_engine_foundation.runtime.corpus import iter_documents
from tt_stagekit.protocol import StageError

from conftest import prepare, run_stage, tiny_config


def test_build_is_deterministic_and_matches_plain_encoding(tmp_path, corpus):
    tok = T.train((d.text for d in iter_documents(list_shards(corpus))), 320)
    bos = T.special_id(tok, T.BOS)
    docs = list(iter_documents(list_shards(corpus)))
    out_a, out_b = tmp_path / "a.bin", tmp_path / "b.bin"
    a = TC.build(iter(docs), tok, bos, out_a, np.dtype("<u2"), batch_chars=500)
    b = TC.build(iter(docs), tok, bos, out_b, np.dtype("<u2"), batch_chars=1 << 20)
    assert out_a.read_bytes() == out_b.read_bytes()  # batching does not change the bytes
    assert a["sha256"] == b["sha256"]
    expected = []
    for doc in docs:
        expected += [bos] + T.encode(tok, doc.text)
    assert np.fromfile(out_a, dtype="<u2").tolist() == expected


def test_stage_reuses_verified_cache_and_detects_corruption(tmp_path, corpus):
    run = tmp_path / "run"
    cfg = tiny_config(corpus_path=str(corpus))
    prepare(run, cfg)
    manifest = json.loads((run / "pretrain/recovery/pretrain-tokens.manifest.json").read_text())
    assert manifest["dtype"] == "<u2" and manifest["token_count"] > 0
    assert manifest["inputs"]["corpus"]["files"][0]["sha256"]
    again = run_stage(run, "token_cache", cfg)
    assert again.code == 0 and any("reusing" in m for m in again.logs())
    data = bytearray((run / "pretrain/recovery/pretrain-tokens.bin").read_bytes())
    data[10] ^= 0xFF
    (run / "pretrain/recovery/pretrain-tokens.bin").write_bytes(bytes(data))
    with pytest.raises(StageError, match="does not match the sha256"):
        TC.verify(run / "pretrain/recovery/pretrain-tokens.bin", manifest)
    broken = run_stage(run, "pretrain", cfg)
    assert broken.code == 1 and "sha256" in broken.logs("error")[-1]


def test_a_cut_corpus_is_logged_and_noted(tmp_path, corpus):
    run = tmp_path / "run"
    cfg = tiny_config(corpus_path=str(corpus), max_chars=2_000)
    assert run_stage(run, "tokenizer", cfg).code == 0
    out = run_stage(run, "token_cache", cfg)
    assert out.code == 0
    assert any("foundation.max_chars = 2000" in m for m in out.logs("warning")), out.text
    result = json.loads((run / "token_cache" / "result.json").read_text())
    assert result["metrics"]["token_cache.cut"] is True and result["metrics"]["token_cache.chars"] == 2_000
    assert any(f"{corpus}:" in n and "max_chars" in n for n in result["notes"])


def test_bad_row_fails_the_stage_naming_file_and_line(tmp_path, corpus):
    run = tmp_path / "run"
    cfg = tiny_config(corpus_path=str(corpus), tokenizer_max_chars=1000, sequence_length=64)  # fits the instruction
    assert run_stage(run, "tokenizer", cfg).code == 0
    with open(corpus, "a") as handle:
        handle.write('{"text": "fine"}\n{"text": oops}\n')
    out = run_stage(run, "token_cache", cfg)
    assert out.code == 1
    assert f"{corpus}:402: malformed JSON" in out.logs("error")[-1]
    assert not (run / "pretrain/recovery/pretrain-tokens.bin").exists()


def test_windows_order_is_a_pure_function_of_seed_and_sample():
    tokens = np.arange(1000, dtype=np.uint16)
    a, b = TC.Windows(tokens, 16, seed=3), TC.Windows(tokens, 16, seed=3)
    full = a.batch(0, 200)
    assert np.array_equal(full[150:170], b.batch(150, 20))  # resume mid-stream, across an epoch boundary
    assert not np.array_equal(TC.Windows(tokens, 16, seed=4).batch(0, 8), full[:8])
    assert np.array_equal(full[0, 1:], full[0, :-1] + 1)
