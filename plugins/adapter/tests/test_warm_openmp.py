"""The stage server's warm module loads OpenMP with idle threads that wait passively (stages/warm.py).

OpenMP reads its wait policy once, when torch loads libgomp: in the stage server, before any stage is forked,
so the default a plain stage gets from `tt_engine_adapter.stages` (OMP_WAIT_POLICY=PASSIVE unless set) must be
in place before the warm module imports torch. Unset, libgomp spins 300,000 times before sleeping
(GOMP_SPINCOUNT) and served stages trained at 3-4 tokens/s on a loaded 2-core machine where plain ones trained
at 43. Real interpreter processes, the environment the host gives the server (no OMP_WAIT_POLICY; the test
runner sets one, so it is removed here), libgomp's own report of what it read (OMP_DISPLAY_ENV=VERBOSE).
"""

from __future__ import annotations

import os
import subprocess
import sys


def _openmp_settings(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-P", "-c", "import tt_engine_adapter.stages.warm"],
                          env={**clean, "OMP_DISPLAY_ENV": "VERBOSE", **env}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def test_the_warm_server_loads_openmp_waiting_passively_when_the_user_chose_nothing():
    report = _openmp_settings()
    assert "GOMP_SPINCOUNT = '0'" in report, report[-1500:]


def test_a_wait_policy_the_user_set_is_kept():
    report = _openmp_settings(OMP_WAIT_POLICY="ACTIVE")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in report and "GOMP_SPINCOUNT = '0'" not in report, report[-1500:]
