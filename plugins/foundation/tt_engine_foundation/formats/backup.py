"""Where `foundation.checkpoint_backup_dir` may not be: the one rule, read by both sides.

Stdlib only. A backup that is, or lies inside, the primary checkpoints folder, the run folder, or a folder that
holds runs protects nothing: one disk failure or one `rm -r` of the run takes both copies, and rolling one
folder's steps can delete the other's. The host's spec validation (spec.py) checks the folders it knows before a
run exists (the spec's default runs folder `.tuned-tensor/runs`, `$TT_HOME/runs`); the pretrain stage checks the
run folder and its checkpoints folder at its start, before any step (stages/pretrain.py). Paths are compared
with symbolic links resolved (a folder that does not exist yet compares by its nearest existing parent).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional

SETTING = "foundation.checkpoint_backup_dir"


def is_within(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or lies inside it, symbolic links resolved."""
    a, b = os.path.realpath(path), os.path.realpath(folder)
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


def misplaced(backup: Path, places: Iterable[tuple[str, Path]]) -> Optional[str]:
    """The refusal for a backup folder inside one of `places` ((what, folder) pairs, most specific first), or
    None when it lies outside them all. The message names the setting and both paths."""
    for what, folder in places:
        if is_within(backup, folder):
            return (f"{SETTING} {backup} is, or lies inside, {what} {folder}: a backup there is lost with it (one "
                    "disk failure or one `rm -r` takes both, and rolling one folder's checkpoints can delete the "
                    "other's); point it at a folder outside the run, best on another disk")
    return None


def tt_home_runs() -> Path:
    """`$TT_HOME/runs`, the run index (TT_HOME defaults as tt_host.models.registry.tt_home says: XDG_DATA_HOME/tt,
    else ~/.local/share/tt). The spec reads it here because a plugin imports only tt_host.api, which has no
    TT_HOME; tests/host (test_foundation_backup_place.py) holds the two to the same folder."""
    home = os.environ.get("TT_HOME")
    if home:
        root = Path(home).expanduser()
    else:
        root = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share").expanduser() / "tt"
    return root.absolute() / "runs"
