"""Showing a run to a person: rich progress bars per stage, and quiet output for --json.

The pipeline talks to a `Reporter`; `RichReporter` draws progress bars on
stderr, `QuietReporter` prints nothing (the command prints one JSON object at
the end instead). A stage's bar counts its steps ("5/14") and its time left is
`StepPace`'s: the mean time per step since the stage's first step (the model's
loading before it is not a step), times the steps left.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Callable, ContextManager, Optional

from rich.console import Console

from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn, \
    TimeElapsedColumn
from rich.text import Text

from tt_host.terminal import TerminalConsole, clean

err_console = TerminalConsole(stderr=True, highlight=False, soft_wrap=True)


class QuietReporter:
    builds_shown = False  # an environment build's progress on stderr (build_display) all the same

    def message(self, text: str, style: str = "") -> None:
        pass

    def stage_started(self, stage: str, description: str) -> None:
        pass

    def event(self, stage: str, event: dict[str, Any]) -> None:
        pass

    def stage_finished(self, stage: str, state: str, seconds: float) -> None:
        pass

    def close(self) -> None:
        pass


def _metric_text(metrics: dict[str, Any]) -> str:
    parts = []
    for key, value in list(metrics.items())[:4]:
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


class StepPace(ProgressColumn):
    """Time left: (steps left) x (mean seconds per step since the first step this column saw), "-:--:--" before
    two steps are known."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.first: dict[int, tuple[float, float]] = {}  # task id -> (time, step) of its first step

    def render(self, task) -> Text:
        now, done = self.clock(), float(task.completed or 0)
        if done > 0 and task.id not in self.first:
            self.first[task.id] = (now, done)
        seen_at, seen = self.first.get(task.id, (now, done))
        if task.total is None or done <= seen or now <= seen_at:
            return Text("-:--:--", style="progress.remaining")
        left = max(0.0, (task.total - done) * (now - seen_at) / (done - seen))
        return Text(time.strftime("%H:%M:%S", time.gmtime(left)) + " left", style="progress.remaining")


class RichReporter(QuietReporter):
    def __init__(self, console: Console = err_console, verbose: bool = False):
        self.console, self.verbose = console, verbose
        self.progress: Optional[Progress] = None
        self.task: Optional[int] = None

    def message(self, text: str, style: str = "") -> None:
        (self.progress.console if self.progress else self.console).print(text, style=style or None, markup=False)

    def stage_started(self, stage: str, description: str) -> None:
        self.progress = Progress(
            SpinnerColumn(), TextColumn("[bold]{task.fields[stage]}[/]"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), StepPace(), console=self.console, transient=False,
            disable=not self.console.is_terminal,
        )
        self.progress.start()
        self.task = self.progress.add_task(stage, total=None, stage=stage, info=description)

    def event(self, stage: str, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "progress" and self.progress is not None and self.task is not None:
            self.progress.update(
                self.task, completed=event.get("step", 0), total=event.get("total"),
                info=_metric_text(event.get("metrics") or {}),
            )
            if not self.console.is_terminal and event.get("metrics"):
                self.console.print(f"{stage} {event.get('step')}/{event.get('total')} {_metric_text(event['metrics'])}",
                                   markup=False)
        elif kind == "log" and not event.get("noise"):  # known-harmless third-party lines stay in the log
            level = event.get("level", "info")
            if level in ("warning", "error"):
                self.message(f"{stage}: {event.get('message')}", "yellow" if level == "warning" else "red")
            elif self.verbose or not event.get("raw"):
                self.message(f"{stage}: {event.get('message')}", "dim")

    def stage_finished(self, stage: str, state: str, seconds: float) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        style = {"completed": "green", "failed": "red", "interrupted": "yellow"}.get(state, "")
        self.console.print(f"[{style or 'white'}]{stage}: {state}[/] ({seconds:.1f}s)")


def reporter(json_mode: bool, verbose: bool = False, quiet: bool = False) -> QuietReporter:
    """Progress on stderr: none under --json or --quiet; with --verbose every line the stages print, too."""
    if quiet or (json_mode and not verbose):
        quiet_one = QuietReporter()
        quiet_one.builds_shown = not quiet and err_console.is_terminal  # --json: stdout is the JSON's alone
        return quiet_one
    return RichReporter(verbose=verbose)


def build_display(reporter: QuietReporter, title: str) -> ContextManager[Callable[[str], None]]:
    """An engine environment build's progress on the reporter's console (tt_host.engines.build_progress): a
    status line with packages and bytes on a terminal; under --json that line on stderr when it is a terminal
    (a first build takes minutes); nothing under --quiet."""
    if isinstance(reporter, RichReporter) or reporter.builds_shown:
        from tt_host.engines.build_progress import BuildDisplay

        return BuildDisplay(getattr(reporter, "console", err_console), title)
    return contextlib.nullcontext(lambda line: None)


def problem_sink(reporter: QuietReporter) -> Callable[[str], None]:
    """Where a problem that does not stop the run is shown (an observer's, the run index's): the progress
    display, or stderr when there is none (--json)."""
    if type(reporter) is QuietReporter:
        return lambda text: print(clean(f"tt: {text}"), file=sys.stderr, flush=True)
    return lambda text: reporter.message(text, "yellow")
