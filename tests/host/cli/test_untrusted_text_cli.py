"""Text users control is shown literally and paths are never folded.

Rich markup in a spec name, a path, a dataset key or an error message (`[/x]`,
`[bold]`) must print as itself and never crash a command; a path printed to a
pipe (`tt run | tee log`) stays on one line, whatever its length.
"""

from __future__ import annotations

import json

import pytest

from badinput_support import in_process_tt, snapshot
from conftest import echo_spec, write_spec

MARKUP = "[/x] evil [bold]"


@pytest.fixture(scope="module")
def tt_in(tmp_path_factory):
    with in_process_tt(tmp_path_factory.mktemp("tt-in")) as tt:
        yield tt


def test_markup_in_paths_keys_and_messages_is_literal(tt_in, tmp_path):
    folder = tmp_path / MARKUP
    spec = echo_spec()
    spec[MARKUP] = 1  # an unknown key: its name is printed as the error's location
    path = write_spec(folder, spec)
    out = tt_in("validate", path)
    assert out.code == 2 and f"{MARKUP}: unknown field" in out.stderr, out.stderr
    assert f"{path}: invalid spec" in out.stderr
    del spec[MARKUP]
    write_spec(folder, spec)
    out = tt_in("validate", path)
    assert out.code == 0 and str(path) in out.stdout.replace("\n", ""), out.stdout
    missing = folder / "[/y]" / "gone.json"
    out = tt_in("run", missing, "--dry-run")
    assert out.code == 2 and str(missing) in out.stderr
    afile = folder / "[" / "z].txt"  # the path reads .../[/z].txt
    afile.parent.mkdir()
    afile.write_text("x")
    out = tt_in("run", path, "--resume", afile)
    assert out.code == 2 and f"--resume {afile} is " in out.stderr and "not a run directory" in out.stderr, out.stderr


def test_runs_list_shows_a_run_named_with_markup_and_the_run_line_is_not_folded(tt, tmp_path):
    deep = tmp_path / ("a-long-folder-name-" * 6) / "[b]more[/b]" / ("another-long-folder-" * 5)
    spec = echo_spec(steps=1)
    spec["name"] = "[/x] evil"
    path = write_spec(deep, spec)
    proc = tt("run", path)  # stdout is a pipe, as with `tt run | tee log`
    assert proc.returncode == 0, proc.stderr
    run_dir = next((deep / ".tuned-tensor" / "runs").iterdir())
    assert f"report: {run_dir / 'report.md'}\n" in proc.stdout, proc.stdout
    listing = tt("runs", "list", deep)
    assert listing.returncode == 0, listing.stderr
    assert "[/x] evil" in listing.stdout and str(run_dir) in listing.stdout, listing.stdout
    got = tt("runs", "get", run_dir)
    assert got.returncode == 0 and "spec [/x] evil" in got.stdout and str(run_dir) in got.stdout
    report = tt("runs", "report", run_dir)
    assert report.returncode == 0 and report.stdout == (run_dir / "report.md").read_text()
    code, out = tt.json("runs", "list", deep)
    assert code == 0 and out["runs"][0]["spec"] == "[/x] evil"


def test_dry_run_and_doctor_tables_are_literal_and_unfolded(tt_in, tmp_path):
    deep = tmp_path / ("x" * 120) / "[/q]"
    path = write_spec(deep, echo_spec())
    before = snapshot(tmp_path)
    out = tt_in("run", path, "--dry-run")
    assert out.code == 0, out.stderr
    assert str(deep / ".tuned-tensor" / "runs") in out.stdout and "prepare" in out.stdout
    assert snapshot(tmp_path) == before
    out = tt_in("doctor", path)
    assert "echo device" in out.stdout and all(len(line) > 0 for line in out.stdout.splitlines()[:1])


def test_runs_list_skips_unreadable_run_files_and_lists_the_rest(tt_in, tmp_path):
    runs = tmp_path / ".tuned-tensor" / "runs"
    for name, text in (("a-good", json.dumps({"id": "a-good", "engine": "echo", "status": "completed",
                                             "spec_name": "[/x] evil"})),
                       ("b-huge", '{"id": ' + "9" * 5000 + "}"), ("c-deep", "[" * 5000 + "]" * 5000),
                       ("d-list", "[1, 2]"), ("e-bytes", "\udcff")):
        (runs / name).mkdir(parents=True)
        (runs / name / "run.json").write_text(text, errors="surrogateescape")
    code, out = tt_in.json("runs", "list", tmp_path)
    assert code == 0 and [r["id"] for r in out["runs"]] == ["a-good"], out
    human = tt_in("runs", "list", tmp_path)
    assert human.code == 0 and "[/x] evil" in human.stdout


def test_dataset_key_with_markup_is_named_literally(tt_in, tmp_path):
    spec = echo_spec()
    spec["evaluation"] = {"general_regression": {"dataset": "general.jsonl"}}
    path = write_spec(tmp_path / "s", spec)
    (tmp_path / "s" / "general.jsonl").write_text(json.dumps({"[/x]": 1, "messages": []}) + "\n")
    out = tt_in("validate", path)
    assert out.code == 2 and "general.jsonl:1: unknown key '[/x]'" in out.stderr, out.stderr
