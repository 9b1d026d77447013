"""Model ids are allocated under a lock: processes registering models of one run at the same time each get an id
and a registry entry of their own, and none is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REGISTER = """
import sys
from pathlib import Path
from tt_host.models.registry import register
from tt_stagekit.manifest import write_manifest
folder = Path(sys.argv[1])
folder.mkdir()
(folder / "weights.bin").write_bytes(folder.name.encode())
write_manifest(folder, "echo", "echo")
print(register(folder, run_id="same-run", run_dir=folder.parent, spec_name="same", engine="echo", kind="echo")["id"])
"""


def test_concurrent_registrations_of_one_id_lose_nothing(tmp_path):
    env = dict(os.environ, TT_HOME=str(tmp_path / "home"))
    procs = [subprocess.Popen([sys.executable, "-c", REGISTER, str(tmp_path / f"model-{n}")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(12)]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        ids.append(out.strip())
    assert len(set(ids)) == 12, ids
    entries = sorted((tmp_path / "home" / "models").glob("*.json"))
    assert len(entries) == 12, [e.name for e in entries]
    assert {json.loads(e.read_text())["id"] for e in entries} == set(ids)
