"""Pretraining checkpoints, their backups and the loss log are durable, seen in the system calls (strace).

A real process trains the checkpoint saver's tiny model two steps and saves it three times through `Saver`
(the background writer, a backup folder, `keep=2` rolling the first away), appending to the loss log, traced;
tt_stagekit.fsync_trace then checks that every checkpoint and backup folder was renamed into place only after each
of its files was fsynced, and its parent fsynced after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tt_stagekit.fsync_trace import command, events, undurable

HERE = Path(__file__).resolve().parent
SAVES = '''
import json
import sys
from pathlib import Path
from tt_engine_foundation.runtime import checkpoints as ckpt
from tt_stagekit.files import append_line
from test_checkpoint_saver import _trained_model
root = Path(sys.argv[1])
model, optimizer = _trained_model()
saver = ckpt.Saver(root / "ckpts", keep=2, backup_dir=root / "backup")
for step in (1, 2, 3):
    saver.save(model, optimizer, ckpt.TrainerState(step=step, samples_consumed=4, tokens_seen=64, last_loss=3.0),
               {"depth": 1}, "f" * 64)
    saver.wait()
    append_line(root / "losses.jsonl", json.dumps({"step": step}))  # the heartbeats writer
'''


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (Debian: apt-get install strace)")
def test_checkpoints_and_backups_are_fsynced_before_and_after_their_rename(tmp_path):
    root, log = tmp_path / "run", tmp_path / "strace.log"
    root.mkdir()
    proc = subprocess.run([*command(log), sys.executable, "-c", SAVES, str(root)], capture_output=True, text=True,
                          timeout=600, cwd=HERE, env={**os.environ, "PYTHONPATH": str(HERE)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trace = events(log.read_text(errors="replace"))
    renamed = {Path(e[2]).relative_to(root).parts[0] for e in trace if e[0] == "rename" and e[2].startswith(str(root))}
    assert renamed == {"ckpts", "backup"}, renamed
    assert len(list((root / "ckpts").iterdir())) == 2
    assert undurable(log, root) == []
    assert ("fsync", str(root / "losses.jsonl")) in trace
