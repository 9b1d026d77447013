"""BOS-aligned best-fit packing (runtime/packing.py): every row starts at a BOS, no document boundary is
crossed without one, and every token of every document is trained on exactly once per epoch."""

import json

import numpy as np
import pytest
import torch

from conftest import prepare, tiny_config
from tt_engine_foundation.runtime import packing
from tt_engine_foundation.runtime.token_cache import Windows
from tt_engine_foundation.testing import write_corpus

BOS, PAD = 0, 1


def _stream(lengths, seed=0):
    """BOS-prefixed documents of the given lengths (BOS included), body ids from 2 up."""
    rng = np.random.default_rng(seed)
    parts = [np.concatenate(([BOS], rng.integers(2, 500, n - 1))) for n in lengths]
    return np.concatenate(parts).astype(np.uint16), parts


@pytest.mark.parametrize("row_tokens", [8, 33])
def test_rows_start_at_bos_cross_no_boundary_without_one_and_lose_nothing(row_tokens):
    lengths = [1, 2, 5, 8, 9, 33, 34, 100, 3, 7, 64, 16, 17, 250, 2, 31]
    tokens, docs = _stream(lengths)
    table = packing.plan(tokens, BOS, row_tokens)
    rows = packing.PackedRows(tokens, table, row_tokens, BOS, PAD, seed=3)
    seen = np.zeros(len(tokens), dtype=np.int64)
    for index in range(rows.count):
        row = rows.row(index)
        assert row[0] == BOS
        pieces = table[rows.bounds[index]:rows.bounds[index + 1]]
        at = 0
        for _, start, length, added in pieces:
            # each piece starts with a BOS: the document's own (a document start) or one added before a chunk
            first = row[at]
            assert first == BOS
            if not added:
                assert tokens[start] == BOS
            else:
                assert tokens[start] != BOS or length == 0
            at += added
            assert np.array_equal(row[at:at + length], tokens[start:start + length])
            seen[start:start + length] += 1
            at += length
        assert at <= row_tokens and np.all(row[at:] == packing.PAD_TARGET)
        # chunks never join two documents: a chunk spans no document start past its first token
        for _, start, length, _ in pieces:
            assert not np.any(tokens[start + 1:start + length] == BOS)
    assert np.all(seen == 1)  # every token exactly once: no text lost, none duplicated
    assert table[:, 3].sum() == sum(max(0, -(-(n - row_tokens) // (row_tokens - 1))) for n in lengths)


def test_best_fit_fills_rows_and_the_plan_is_deterministic():
    tokens, _ = _stream([5, 3, 4, 4, 2, 6, 2, 6, 7, 1] * 10)
    table = packing.plan(tokens, BOS, 8)
    assert np.array_equal(table, packing.plan(tokens, BOS, 8))
    assert packing.summary(table, 8)["fill"] == 1.0  # 5+3, 4+4, 6+2, 7+1 fill every row exactly
    rows = packing.PackedRows(tokens, table, 8, BOS, PAD, seed=5)
    assert np.array_equal(rows.batch(7, 4), rows.batch(7, 4))
    first_epoch = {tuple(r) for r in rows.batch(0, rows.count)}
    assert len(first_epoch) == rows.count  # one epoch visits every row once


def test_padding_is_an_ignored_target_and_a_pad_input():
    import torch

    tokens, _ = _stream([3, 3])
    table = packing.plan(tokens, BOS, 8)
    batch = torch.from_numpy(packing.PackedRows(tokens, table, 8, BOS, PAD, seed=0).batch(0, 1))
    inputs, targets = packing.inputs_and_targets(batch, PAD)
    assert inputs[0, -1] == PAD and targets[0, -1] == packing.PAD_TARGET and targets[0, 4] != packing.PAD_TARGET


def test_a_stream_not_starting_at_bos_is_refused():
    from tt_stagekit.protocol import StageError

    with pytest.raises(StageError, match="does not start with <\\|bos\\|>"):
        packing.plan(np.array([5, 0, 3], dtype=np.uint16), BOS, 4)


def test_token_cache_stage_records_the_plan_in_its_manifest(tmp_path):
    cfg = tiny_config(corpus_path=str(write_corpus(tmp_path / "corpus.jsonl")))
    run = tmp_path / "run"
    prepare(run, cfg)
    manifest = json.loads((run / "pretrain/recovery/pretrain-tokens.manifest.json").read_text())
    record = manifest["packing"]
    assert record["kind"] == "bos_best_fit" and record["row_tokens"] == cfg["sequence_length"] + 1
    assert manifest["inputs"]["packing"] == {"kind": "bos_best_fit", "row_tokens": cfg["sequence_length"] + 1}
    table = packing.read_table(run / "pretrain/recovery/pretrain-tokens.packing.bin", record["chunks"])
    tokens = np.fromfile(run / "pretrain/recovery/pretrain-tokens.bin", dtype=np.dtype(manifest["dtype"]))
    assert table[:, 2].sum() == len(tokens) and record["rows"] == table[:, 0].max() + 1
    assert 0.5 < record["fill"] <= 1.0


def test_start_share_repeats_document_beginnings_and_keeps_every_row():
    # one long document (many later chunks) and a few short ones: few rows begin a document
    tokens, _ = _stream([200, 3, 4, 150, 5], seed=1)
    table = packing.plan(tokens, BOS, 8)
    plain = packing.PackedRows(tokens, table, 8, BOS, PAD, seed=2)
    weighted = packing.PackedRows(tokens, table, 8, BOS, PAD, seed=2, start_share=0.5)
    starts = set(plain.starts.tolist())
    for index in range(plain.count):  # a start row is one whose first token is a document's own BOS
        first = table[plain.bounds[index]]
        assert (index in starts) == (first[3] == 0 and tokens[first[1]] == BOS)
    assert 0 < len(starts) < plain.count / 4
    epoch = weighted.order
    assert set(epoch.tolist()) == set(range(plain.count))  # every row still comes at least once
    assert np.all(np.bincount(epoch, minlength=plain.count)[sorted(set(range(plain.count)) - starts)] == 1)
    share = np.isin(epoch, list(starts)).mean()
    assert 0.5 <= share < 0.5 + 1 / len(epoch) + 1e-9  # the share asked for, rounded up by at most one row
    sampled = weighted.batch(0, weighted.epoch_rows)
    assert sorted(map(tuple, sampled)) == sorted(map(tuple, (weighted.row(i) for i in epoch)))
    assert np.array_equal(sampled, packing.PackedRows(tokens, table, 8, BOS, PAD, seed=2, start_share=0.5)
                          .batch(0, weighted.epoch_rows))  # a pure function of the seed: resume is exact


def test_start_share_zero_or_already_met_changes_nothing():
    tokens, _ = _stream([200, 3, 4, 150, 5], seed=1)
    table = packing.plan(tokens, BOS, 8)
    plain = packing.PackedRows(tokens, table, 8, BOS, PAD, seed=4)
    assert np.array_equal(plain.order, np.arange(plain.count))
    low = packing.PackedRows(tokens, table, 8, BOS, PAD, seed=4, start_share=len(plain.starts) / plain.count / 2)
    assert np.array_equal(low.batch(0, 3 * plain.count), plain.batch(0, 3 * plain.count))


@pytest.mark.parametrize("share", [0.0, 0.5])
def test_targets_counts_what_a_batch_scores_without_building_it(share):
    """`targets(start, n)` (the pretraining loop's weights of its forwards) equals the non-padding targets of
    `batch(start, n)`, over ranges that cross epochs; a window of the stream sampler scores every target."""
    tokens, _ = _stream([1, 2, 5, 8, 9, 33, 34, 100, 3, 7, 64, 16, 17, 250, 2, 31])
    rows = packing.PackedRows(tokens, packing.plan(tokens, BOS, 8), 8, BOS, PAD, seed=5, start_share=share)
    for start, n in [(0, 1), (0, 7), (rows.epoch_rows - 3, 9), (3 * rows.epoch_rows + 1, 40)]:
        _, targets = packing.inputs_and_targets(torch.from_numpy(rows.batch(start, n)), PAD)
        assert rows.targets(start, n) == int((targets != packing.PAD_TARGET).sum()), (start, n)
    windows = Windows(tokens, 7, seed=5)
    _, targets = packing.inputs_and_targets(torch.from_numpy(windows.batch(5, 6)), PAD)
    assert windows.targets(5, 6) == targets.numel()
