"""The Hugging Face hub cache as the host reads it (never the network): where it is, which commit a ref names.

Used where the host needs a hub model's commit without starting an engine: the Node-spec migration's pin line
(tt_host.spec.legacy) and `tt models prefetch` / `verify-base` (tt_host.models.basemodel). The layout is
huggingface_hub's: `<cache>/models--org--name/{refs/<ref>, snapshots/<commit>/}`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

COMMIT = re.compile(r"^[0-9a-f]{40}\Z")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?\Z")  # a hub id: ORG/NAME or NAME


def cache_dir() -> Path:
    """HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub (huggingface_hub's order)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def repo_folder(repo: str) -> Path:
    return cache_dir() / ("models--" + repo.replace("/", "--"))


def cached_commit(repo: str, revision: str) -> Optional[str]:
    """The commit `revision` (a commit, branch or tag) names in the cache, when its snapshot is there."""
    folder = repo_folder(repo)
    if COMMIT.match(revision):
        commit = revision
    else:
        try:
            commit = (folder / "refs" / revision).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
    return commit if COMMIT.match(commit) and (folder / "snapshots" / commit).is_dir() else None


def snapshot(repo: str, commit: str) -> Path:
    return repo_folder(repo) / "snapshots" / commit
