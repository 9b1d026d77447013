"""The train result's host-memory figure is the stage's own (runtime/sharding.py `own_peak_bytes`): a stage
started by fork and exec from a parent holding 1.5 GB reports its own peak, not the parent's (Linux's
ru_maxrss carries the peak of the image before exec). Real processes."""

from __future__ import annotations

import subprocess
import sys

CHILD = "from tt_engine_adapter.runtime.sharding import own_peak_bytes; print(own_peak_bytes())"
PARENT = f"""
import os, sys
ballast = bytearray(1536 * 1024 * 1024)  # 1.5 GB resident in the parent
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-P", "-c", {CHILD!r}])
os.waitpid(pid, 0)
"""


def test_a_stage_forked_from_a_large_parent_reports_its_own_peak_memory():
    done = subprocess.run([sys.executable, "-P", "-c", PARENT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stdout.strip().splitlines()[-1])
    assert 0 < peak < 512 * 1024 * 1024, peak  # a bare interpreter with torch's import: well under the parent
