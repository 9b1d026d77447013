"""Observer plugins (`tt_stage_event`): every stage's events arrive in order; a raising observer is logged and ignored;
the shipped CSV observer (plugins/observer-csv) writes one CSV per stage."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

from conftest import REPO, echo_spec, write_spec
from plugin_site import add_distribution

CSV_SOURCE = REPO / "plugins" / "observer-csv"

RECORDER = '''
import json, os
from tt_host.hookspecs import hookimpl

@hookimpl
def tt_stage_event(run_dir, stage, event):
    with open(os.environ["TT_TEST_OBSERVED"], "a") as handle:
        handle.write(json.dumps({"run_dir": run_dir, "stage": stage, "event": event}) + "\\n")
'''

BOOM = '''
from tt_host.hookspecs import hookimpl

@hookimpl
def tt_stage_event(run_dir, stage, event):
    raise RuntimeError("observer exploded on purpose")
'''


def with_observers(tt, tmp_path):
    site = tmp_path / "site-observers"
    add_distribution(site, "tt-recorder", "1.0", {"recorder": "tt_recorder"}, {"tt_recorder": RECORDER})
    add_distribution(site, "tt-boom", "1.0", {"boom": "tt_boom"}, {"tt_boom": BOOM})
    add_distribution(site, "tt-observer-csv", "0.1.0", {"observer-csv": "tt_observer_csv"})
    tt.env["PYTHONPATH"] = os.pathsep.join([str(site), str(CSV_SOURCE), tt.env["PYTHONPATH"]])
    tt.env["TT_TEST_OBSERVED"] = str(tmp_path / "observed.jsonl")
    tt.env["COLUMNS"] = "300"
    return tt


def test_observers_see_every_event_in_order_and_a_raising_one_is_ignored(tt, tmp_path):
    tt = with_observers(tt, tmp_path)
    code, listing = tt.json("engines", "list")
    assert not listing["problems"], listing["problems"]  # observers yield no engines and are not problems
    proc = tt("run", write_spec(tmp_path / "spec", echo_spec(steps=3)))  # human mode: warnings are shown
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "observer 'boom' failed" in proc.stderr and "exploded on purpose" in proc.stderr

    records = [json.loads(line) for line in (tmp_path / "observed.jsonl").read_text().splitlines()]
    run_dir = Path(records[0]["run_dir"])
    assert {r["run_dir"] for r in records} == {str(run_dir)}
    assert json.loads((run_dir / "report.json").read_text())["status"] == "completed"

    # stages in pipeline order, each one contiguous: stage_start, its events, stage_end
    order = []
    for record in records:
        if not order or order[-1] != record["stage"]:
            order.append(record["stage"])
    assert order == ["prepare", "train", "evaluate"]
    for stage in order:
        events = [r["event"] for r in records if r["stage"] == stage]
        assert events[0] == {"type": "stage_start", "stage": stage, "resume": False}
        assert events[-1]["type"] == "stage_end" and events[-1]["state"] == "completed" and events[-1]["exit_code"] == 0
        assert all(e["type"] not in ("stage_start", "stage_end") for e in events[1:-1])
    train = [r["event"] for r in records if r["stage"] == "train"]
    assert [e["step"] for e in train if e["type"] == "progress"] == [1, 2, 3]
    assert any(e["type"] == "artifact" for e in train)
    prepare = [r["event"] for r in records if r["stage"] == "prepare"]
    assert any(e["type"] == "log" and "training rows" in e["message"] for e in prepare)

    # the shipped CSV observer wrote the numeric progress/metrics values of each stage
    path = run_dir / "metrics" / "train.csv"
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["time", "event", "step", "total", "name", "value"]
    assert [r[1:] for r in rows[1:]] == [["progress", str(s), "3", "loss", str(1.0 / s)] for s in (1, 2, 3)]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert not (run_dir / "metrics" / "prepare.csv").exists()  # prepare emits no numbers


def test_disabling_the_raising_observer_silences_it(tt, tmp_path):
    tt = with_observers(tt, tmp_path)
    tt.env["TT_DISABLE_PLUGINS"] = "boom,observer-csv"
    proc = tt("run", write_spec(tmp_path / "spec", echo_spec(steps=1)))
    assert proc.returncode == 0 and "observer 'boom'" not in proc.stderr
    run_dir = Path(json.loads((tmp_path / "observed.jsonl").read_text().splitlines()[0])["run_dir"])
    assert not (run_dir / "metrics").exists()


def test_csv_observer_appends_with_one_header(tmp_path):
    sys.path.insert(0, str(CSV_SOURCE))
    try:
        import tt_observer_csv as observer
    finally:
        sys.path.remove(str(CSV_SOURCE))
    for step in (1, 2):  # e.g. a resumed stage keeps appending to the same file
        observer.tt_stage_event(run_dir=str(tmp_path), stage="train",
                                event={"type": "progress", "step": step, "total": 2, "unit": "step",
                                       "metrics": {"loss": 0.5, "lr": 1e-3, "note": "text is skipped", "ok": True}})
    observer.tt_stage_event(run_dir=str(tmp_path), stage="train", event={"type": "metrics", "step": None,
                                                                          "values": {"bpb": 1.25}})
    observer.tt_stage_event(run_dir=str(tmp_path), stage="train", event={"type": "log", "message": "x"})
    rows = list(csv.reader((tmp_path / "metrics" / "train.csv").open()))
    assert [r[0] for r in rows].count("time") == 1
    assert [r[1:] for r in rows[1:]] == [
        ["progress", "1", "2", "loss", "0.5"], ["progress", "1", "2", "lr", "0.001"],
        ["progress", "2", "2", "loss", "0.5"], ["progress", "2", "2", "lr", "0.001"],
        ["metrics", "", "", "bpb", "1.25"],
    ]
