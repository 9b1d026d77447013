"""A stage's progress bar on a terminal counts its steps ("5/14") and its time left is the pace since the first
step (tt_host.runs.progress.StepPace), not since the stage started: the model's loading is not a step."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from tt_host.runs.progress import RichReporter, StepPace


def test_the_time_left_is_the_pace_since_the_first_step_times_the_steps_left():
    now = [100.0]  # the stage started at 75: 25 s of loading before its first step
    pace = StepPace(clock=lambda: now[0])
    task = SimpleNamespace(id=1, completed=1, total=14)
    assert pace.render(task).plain == "-:--:--"  # one step seen: no pace yet
    now[0], task.completed = 110.0, 3  # 2 steps in 10 s: 5 s a step, 11 left
    assert pace.render(task).plain == "00:00:55 left"
    task.total = None
    assert pace.render(task).plain == "-:--:--"


def test_the_bar_shows_the_step_counter():
    out = io.StringIO()
    shown = RichReporter(Console(file=out, force_terminal=True, width=160, color_system=None))
    shown.stage_started("train", "loading the model")
    shown.event("train", {"type": "progress", "step": 5, "total": 14, "metrics": {"loss": 1.5}})
    shown.progress.refresh()
    shown.stage_finished("train", "completed", 3.0)
    assert "5/14" in out.getvalue() and "loss=1.5" in out.getvalue(), out.getvalue()
