"""The real server with a test gate: `python -m tt_engine_adapter.testing.gated_serve GATE REQUEST.json`.

It runs `tt_engine_adapter.serve` unchanged, except that while the file
GATE exists the scheduler thread holds at its next token pick (after the
forward pass, before the token is taken). While it holds, `GATE.held` is a
JSON object `{"gone": N}`: N requests still being answered whose client went
away (their cancel flag is set). Removing GATE lets the thread go on, and
`GATE.held` disappears. Tests (`serving.Gate`) use it to make "a generation
is running" and "the server saw the client leave" certain states instead of
races against the model's speed. Nothing here is used outside tests.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HOLD_LIMIT_SECONDS = 300.0


def install(gate: Path) -> None:
    """Patch the scheduler's token pick and job submission so that `gate` can hold the scheduler thread."""
    from tt_engine_adapter.decode import picker
    from tt_engine_adapter.serve.batching import DONE, Scheduler

    held = gate.with_name(gate.name + ".held")
    live: dict[int, object] = {}  # jobs submitted and not yet answered (no DONE yet)
    real_pick, real_submit = picker.pick, Scheduler.submit

    def hold() -> None:
        deadline, state = time.monotonic() + HOLD_LIMIT_SECONDS, None
        while gate.exists():
            gone = sum(job.cancel.is_set() for job in list(live.values()))
            if gone != state:
                tmp = held.with_name(held.name + ".tmp")
                tmp.write_text(json.dumps({"gone": gone}))
                os.replace(tmp, held)
                state = gone
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test gate {gate} stayed closed for {HOLD_LIMIT_SECONDS:g} s")
            time.sleep(0.01)
        held.unlink(missing_ok=True)

    def pick(*args, **kwargs):
        if gate.exists():
            hold()
        return real_pick(*args, **kwargs)

    def submit(self, job) -> None:
        emit = job.emit

        def tracked(item) -> None:
            if item is DONE:
                live.pop(id(job), None)
            emit(item)

        job.emit = tracked
        live[id(job)] = job
        try:
            real_submit(self, job)
        except BaseException:
            live.pop(id(job), None)
            raise

    picker.pick, Scheduler.submit = pick, submit


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tt_engine_adapter.testing.gated_serve GATE REQUEST.json", file=sys.stderr)
        return 2
    install(Path(argv[0]))
    from tt_engine_adapter.serve.__main__ import main as serve

    return serve([argv[1]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
