"""Two `tt run SPEC` started in the same second get two run folders (the second claims the next free name)."""

from __future__ import annotations

import json

from conftest import echo_spec, write_spec


def test_two_runs_of_one_spec_in_the_same_second_get_two_folders(tt, tmp_path, monkeypatch):
    from tt_host.runs.opening import claim_new_run_dir

    target = tmp_path / "runs" / "20260101-000000-abcdef01"  # the id two runs started in one second compute
    assert [claim_new_run_dir(target) for _ in range(3)] == [target, target.with_name(target.name + "-2"),
                                                             target.with_name(target.name + "-3")]
    spec = write_spec(tmp_path / "s", echo_spec(steps=2))
    procs = [tt.popen("run", spec, "--json") for _ in range(2)]  # started together: one second, as a rule
    outs = [json.loads(proc.communicate(timeout=300)[0]) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert len({out["run_dir"] for out in outs}) == 2, outs
