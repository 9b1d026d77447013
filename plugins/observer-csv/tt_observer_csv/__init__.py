"""tt observer plugin: each stage's progress and metrics events, as CSV rows under `<run_dir>/metrics/`.

Implements only the `tt_stage_event` hook (no engines). One file per stage,
`<run_dir>/metrics/<stage>.csv`, columns `time,event,step,total,name,value`,
one row per numeric value of an event (`progress.metrics`, `metrics.values`).
The header is written once by whoever creates the file (O_CREAT|O_EXCL); an
event's rows go out in one O_APPEND write, so concurrent readers never see a
partial event and a resumed stage appends to the same file.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
from typing import Any, Mapping

import pluggy

hookimpl = pluggy.HookimplMarker("tt")  # the same marker as tt_host.hookspecs.hookimpl

HEADER = ("time", "event", "step", "total", "name", "value")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def _numbers(event: Mapping[str, Any]) -> dict[str, float | int]:
    values = event.get("metrics") if event.get("type") == "progress" else event.get("values")
    if not isinstance(values, Mapping):
        return {}
    return {str(k): v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _line(fields) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(fields)
    return buffer.getvalue()


def _timestamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def csv_path(run_dir: str, stage: str) -> str:
    return os.path.join(run_dir, "metrics", _SAFE.sub("_", stage) + ".csv")


def _append(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        text = _line(HEADER) + text  # we created it: the header goes first, in the same write
    except FileExistsError:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


@hookimpl
def tt_stage_event(run_dir: str, stage: str, event: Mapping[str, Any]) -> None:
    if event.get("type") not in ("progress", "metrics"):
        return
    numbers = _numbers(event)
    if not numbers:
        return
    step, total = event.get("step"), event.get("total")
    when = _timestamp()
    rows = "".join(
        _line((when, event["type"], "" if step is None else step, "" if total is None else total, name, value))
        for name, value in numbers.items()
    )
    _append(csv_path(run_dir, stage), rows)
