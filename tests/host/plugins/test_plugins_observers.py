"""Observer plugins: run start, every stage's events in order, the host's scores, run end; an observer that raises,
calls sys.exit, raises KeyboardInterrupt or hangs is reported once and the run completes; the shipped CSV observer
(plugins/observer-csv) writes one CSV per stage."""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

from conftest import REPO, echo_spec, write_spec
from plugin_site import add_distribution

CSV_SOURCE = REPO / "plugins" / "observer-csv"

RECORDER = '''
import json, os
from tt_host.hookspecs import hookimpl

def _write(record):
    with open(os.environ["TT_TEST_OBSERVED"], "a") as handle:
        handle.write(json.dumps(record) + "\\n")

@hookimpl
def tt_stage_event(run_dir, stage, event):
    _write({"run_dir": run_dir, "stage": stage, "event": event})

@hookimpl
def tt_run_start(run):
    _write({"run_start": {"run_dir": str(run.run_dir), "spec_name": run.spec_name, "engine": run.engine,
                          "sha": run.system_message_sha256, "message": run.system_message, "resumed": run.resumed}})

@hookimpl
def tt_run_end(run, report):
    _write({"run_end": {"run_dir": str(run.run_dir), "status": report["status"]}})
'''

# Each misbehaves on every call it gets; tt must report each one once and finish the run.
MISBEHAVING = {
    "exits": "import sys\n\ndef act():\n    sys.exit(3)\n",
    "interrupts": "def act():\n    raise KeyboardInterrupt('observer pressed ctrl-c')\n",
    "hangs": "import time\n\ndef act():\n    time.sleep(3600)\n",
}
HOOKS = '''
from tt_host.hookspecs import hookimpl

@hookimpl
def tt_run_start(run):
    act()

@hookimpl
def tt_stage_event(run_dir, stage, event):
    act()

@hookimpl
def tt_run_end(run, report):
    act()
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

    assert proc.stderr.count("observer 'boom' failed") == 1, proc.stderr  # reported once, not once per event
    records = [json.loads(line) for line in (tmp_path / "observed.jsonl").read_text().splitlines()]
    start, end = records.pop(0)["run_start"], records.pop()["run_end"]
    run_dir = Path(start["run_dir"])
    assert start["spec_name"] == "capitals" and start["engine"] == "echo" and not start["resumed"]
    assert start["message"].startswith("Answer with the capital city.") and len(start["sha"]) == 64
    assert end == {"run_dir": str(run_dir), "status": "completed"}
    scores = records.pop()  # the host's scores of the evaluating stage come after its stage_end
    assert scores["stage"] == "evaluate" and scores["event"]["type"] == "scores"
    report = json.loads((run_dir / "report.json").read_text())
    assert scores["event"]["values"] == {k: v for k, v in report["metrics"].items() if k.startswith("candidate.")
                                         or k == "eval.count"}
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
    run_dir = Path(json.loads((tmp_path / "observed.jsonl").read_text().splitlines()[0])["run_start"]["run_dir"])
    assert not (run_dir / "metrics").exists()


def test_an_observer_that_exits_interrupts_or_hangs_is_reported_once_and_the_run_completes(tt, tmp_path):
    tt = with_observers(tt, tmp_path)
    site = tmp_path / "site-observers"
    for name, body in MISBEHAVING.items():
        add_distribution(site, f"tt-{name}", "1.0", {name: f"tt_{name}"}, {f"tt_{name}": body + HOOKS})
    tt.env["TT_DISABLE_PLUGINS"] = "boom,observer-csv"
    # the limit applies to every observer call, the healthy observer's too: 10 s is far beyond its longest
    # (a line appended to a file) on a loaded machine, and is what the hung one costs this test
    tt.env["TT_OBSERVER_TIMEOUT_SECONDS"] = "10"
    started = time.monotonic()
    proc = tt("run", write_spec(tmp_path / "spec", echo_spec(steps=3)))
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.count("observer 'exits' failed on run start: plugin 'exits' raised SystemExit(3)") == 1
    assert proc.stderr.count("observer 'interrupts' failed on run start: plugin 'interrupts' raised Keyboard") == 1
    assert proc.stderr.count("observer 'hangs' did not return from run start within 10s") == 1, proc.stderr
    assert proc.stderr.count("observer '") == 3, proc.stderr
    assert seconds < 120, seconds  # the hung observer was left behind, not waited for
    records = [json.loads(line) for line in (tmp_path / "observed.jsonl").read_text().splitlines()]
    assert records[-1]["run_end"]["status"] == "completed"  # the healthy observer saw the whole run
    run_dir = Path(records[0]["run_start"]["run_dir"])
    assert json.loads((run_dir / "report.json").read_text())["status"] == "completed"


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
