"""A run whose disk filled: one clear error, run.json left `failed`, a report if it fits (issue 30, item 4).

While tt drives a run it holds RESERVE_BYTES in the run folder (`RunDir.reserve`, `<run>/.tt-reserve`). When a
write of the host finds no space (`fsutil.DiskFull`: run.json, spec.json, a request, the registry, the
report), the reserve is given back and then run.json is written `failed` with the error, every stage still
marked running as failed too, and the report written (the ending "out of disk" handed to tt_host.reports), so
the last word on disk is the true one and the next `tt run --resume` continues once space is free. A new run
whose creation found no space leaves no folder behind (tt_host.runs.opening removes what it made).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from tt_host.fsutil import DiskFull
from tt_host.reports.ending import OUT_OF_DISK, Ending, resume_command
from tt_host.reports.report import build_report, write_report
from tt_host.runs import state as states
from tt_host.runs.state import RunState
from tt_host.runs.store import RunDir


def out_of_disk(run: RunDir, state: Optional[RunState], exc: DiskFull, spec_path: Path, created: bool) -> str:
    """Record the failure as far as the freed reserve allows; returns the one message for the user."""
    run.release_reserve()
    message = str(exc)
    if not created:
        return f"{message}. Nothing was started (no run.json was written in {run.path}): free space and run again"
    resume = resume_command(spec_path, run.path)
    if state is None:
        try:
            state = run.load_state()
        except (OSError, ValueError):
            return f"{message}; run.json could not be read to mark the run failed. Free space, then `{resume}`"
    state.status, state.error = states.RUN_FAILED, message
    for record in state.stages.values():
        if record.state == states.RUNNING:
            record.failed(states.FAILED, message)
    try:
        run.save(state)
    except DiskFull:
        return f"{message}; run.json could not be updated either (it may still say running). Free space, then `{resume}`"
    try:
        ending = Ending(OUT_OF_DISK, state.to_json(), spec_path, run.path, error=message)
        write_report(run.path, build_report(ending), {})
    except DiskFull:
        pass  # the report did not fit: run.json says failed, which is what matters
    return f"{message}. run.json says failed; the finished stages are kept: free space, then `{resume}`"
