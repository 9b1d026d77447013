"""A model folder's JSON files are read through the safe reader (tt_host.models.references._read_json over
tt_stagekit.userinput.read_regular): an adapter folder whose unlisted `tt-adapter.json` is a FIFO or a link to
/dev/zero is refused naming it (exit 2, a ModelRefError), never waited on or read until memory runs out. Real
processes, so a hang is a timeout, not a stuck test run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RESOLVE = ("import sys\nfrom pathlib import Path\nfrom tt_host.models.references import ModelRefError, from_folder\n"
           "try:\n    from_folder(Path(sys.argv[1]))\nexcept ModelRefError as exc:\n"
           "    print(exc.exit_code, exc)\n")


def adapter_folder(folder: Path) -> Path:
    from tt_stagekit.manifest import write_manifest

    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    write_manifest(folder, "adapter", "adapter")  # tt-adapter.json is not among the listed files
    return folder


def test_an_unlisted_info_file_that_is_a_fifo_or_a_link_to_dev_zero_is_refused_naming_it(tmp_path):
    for name, plant in (("fifo", os.mkfifo), ("zero", lambda path: path.symlink_to("/dev/zero"))):
        folder = adapter_folder(tmp_path / name)
        plant(folder / "tt-adapter.json")
        done = subprocess.run([sys.executable, "-P", "-c", RESOLVE, str(folder)], capture_output=True, text=True,
                              timeout=60, cwd=REPO)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("2 ") and str(folder / "tt-adapter.json") in done.stdout, done.stdout
        assert "not a regular file" in done.stdout, done.stdout
