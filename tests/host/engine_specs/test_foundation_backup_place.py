"""`foundation.checkpoint_backup_dir` inside the spec's runs folder (where its run folders and their checkpoints
live by default) or inside `$TT_HOME/runs` is refused by `tt validate` and `tt run`, exit 2, naming the setting
and both paths, nothing created; a folder beside them is accepted. (Inside a run folder given with --resume:
refused at the pretrain stage's start, plugins/foundation/tests/test_pretrain_recovery.py.)"""

from __future__ import annotations

import json
import os

import pytest

from badinput_support import assert_refused, in_process_tt, snapshot
from test_foundation_finetune_rate import small_foundation_spec


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


@pytest.mark.parametrize("where", [".tuned-tensor/runs", ".tuned-tensor/runs/run-1/pretrain/recovery/checkpoints",
                                   "TT_HOME/runs/backup"])
def test_a_backup_among_the_runs_is_refused_naming_the_setting_and_both_paths(tt_in, tmp_path, where):
    folder = tmp_path / "s"
    value = where.replace("TT_HOME", os.environ["TT_HOME"])
    spec = small_foundation_spec(folder, checkpoint_backup_dir=value)
    out = assert_refused(tt_in, spec, "foundation.checkpoint_backup_dir", tmp_path, snapshot(tmp_path))
    message = json.dumps(out)
    runs = os.path.join(os.environ["TT_HOME"], "runs") if where.startswith("TT_HOME") else str(folder / ".tuned-tensor/runs")
    assert "foundation.checkpoint_backup_dir" in message and runs in message
    assert (value if os.path.isabs(value) else str(folder / value)) in message


def test_a_backup_beside_the_runs_is_accepted(tt_in, tmp_path):
    spec = small_foundation_spec(tmp_path / "s", checkpoint_backup_dir=".tuned-tensor/backup")
    code, out = tt_in.json("validate", spec)
    assert code == 0, out


def test_the_folders_the_rule_names_are_the_hosts(monkeypatch, tmp_path):
    """The spec reads `$TT_HOME/runs` and the default runs folder itself (a plugin imports only tt_host.api): the
    same folders the host uses, with TT_HOME set and by its default."""
    from tt_engine_foundation.formats.backup import tt_home_runs
    from tt_engine_foundation.spec import RUNS_FOLDER
    from tt_host.runlayout import RUNS_FOLDER as HOST_RUNS_FOLDER
    from tt_host.runs.index import index_dir

    assert RUNS_FOLDER == HOST_RUNS_FOLDER
    monkeypatch.setenv("TT_HOME", str(tmp_path / "home"))
    assert tt_home_runs() == index_dir()
    monkeypatch.delenv("TT_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert tt_home_runs() == index_dir() == tmp_path / "xdg" / "tt" / "runs"
