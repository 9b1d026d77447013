"""Each shared helper has one implementation, in tt_stagekit (spec models: tt_host.spec.schema), used by the
host, the engines and the scaffold.

The repository's `duplicates` tool finds repeated blocks of six lines or more; these helpers are shorter,
so this test pins them by what a copy would contain (a definition, a hashing loop, a temp-file rename,
an nvidia-smi call).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ["tt_host", "sdk/stagekit/tt_stagekit", "plugins/foundation/tt_engine_foundation",
         "plugins/adapter/tt_engine_adapter"]
ONLY_IN = {
    r"^\s*def normalize_prompt\(": "sdk/stagekit/tt_stagekit/sameness.py",
    r"\"Guidelines:\\n\"": "sdk/stagekit/tt_stagekit/chatrows.py",  # the system-message format itself
    r"^\s*def is_loopback\(": "sdk/stagekit/tt_stagekit/addresses.py",
    r"digest\.update\((block|chunk)\)": "sdk/stagekit/tt_stagekit/files.py",  # sha256 of a file, read in blocks
    r"tempfile\.mkstemp\(": "sdk/stagekit/tt_stagekit/files.py",  # atomic write: temp file + rename
    r"[\"']nvidia-smi[\"']": "sdk/stagekit/tt_stagekit/gpus.py",
    # The torchrun settings, declared once (tt_stagekit.settings); the host's spec model is derived from them.
    r"^\s*nproc_per_node: int = ": "sdk/stagekit/tt_stagekit/launcher.py",
}


def _sources():
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".tmpl") and ".venv" not in path.parts:
                yield path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8")


def test_each_shared_helper_is_implemented_once_in_stagekit():
    sources = dict(_sources())
    for pattern, home in ONLY_IN.items():
        places = sorted(name for name, text in sources.items() if re.search(pattern, text, re.M))
        assert places == [home], f"{pattern!r} should appear only in {home}, found in {places}"


def test_the_scaffold_carries_no_copy_of_the_protocol():
    templates = REPO / "tt_host" / "engines" / "scaffold_templates"
    assert not list(templates.rglob("protocol.py*"))
    assert "tt-stagekit" in (templates / "pyproject.toml.tmpl").read_text()
