"""A registered model never changes under its version (tt_host.models.versions): a resumed run that trains again
registers a new version, the activated one keeps its files and is what `tt serve active` serves; a tampered active
version is refused naming the digests; `tt models history MODEL` lists versions and `tt models gc` removes only
versions nothing points at.

Host only: the echo test engine, re-declared with replaceable stages (as the shipped engines' training stages
are) so that a resume after adding an example trains again instead of being refused.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import urllib.request
from pathlib import Path

from conftest import TT, base_env, echo_spec, write_spec
from plugin_site import ECHO_SOURCE, add_distribution

REPLACEABLE_ECHO = '''
from dataclasses import replace

from tt_engine_echo import plugin
from tt_host.hookspecs import hookimpl


@hookimpl
def tt_engines():
    for engine in plugin.tt_engines():
        yield replace(engine, stages=tuple(replace(stage, replaceable=True) for stage in engine.stages))
'''


def digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def served_answer(tt: TT, prompt: str) -> tuple[int, str]:
    """Ask `tt serve active` one question; (exit code of a refusal, or 0, and the answer or the error)."""
    process = tt.popen("serve", "active", "--port", "0", "--json")
    try:
        for line in process.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # a refusal: one indented JSON error object
                event = json.loads(line + process.stdout.read())
            if event.get("type") == "ready":
                request = urllib.request.Request(
                    f"{event['url']}/v1/chat/completions", method="POST", headers={"Content-Type": "application/json"},
                    data=json.dumps({"model": event["model"], "messages": [{"role": "user", "content": prompt}]}).encode())
                with urllib.request.urlopen(request, timeout=30) as response:
                    return 0, json.loads(response.read())["choices"][0]["message"]["content"]
            if "error" in event:
                return process.wait(timeout=60), event["error"]["message"]
        return process.wait(timeout=60), process.stderr.read()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)


def test_a_resumed_run_adds_a_version_and_the_active_one_never_changes(tmp_path):
    site = add_distribution(tmp_path / "site", "tt-engine-echo", "0.1.0", {"echo": "echo_replaceable"},
                            {"echo_replaceable": REPLACEABLE_ECHO})
    tt = TT(base_env(tmp_path, [str(site), str(ECHO_SOURCE)]), tmp_path)
    spec = echo_spec()
    path = write_spec(tmp_path / "s", spec)
    code, out = tt.json("run", path)
    assert code == 0, out
    run, model = Path(out["run_dir"]), out["report"]["models"][0]
    assert model["version"] == 1
    trained = json.loads((run / "train" / "request.json").read_text())["train_rows"][0]["messages"][1]["content"]
    assert tt.json("models", "activate", model["id"], "--force")[0] == 0
    v1 = Path(tt.json("models", "get", model["id"])[1]["path"])
    before = digests(v1)

    spec["examples"].append({"input": "Capital of the moon?", "output": "Tranquility"})
    spec["examples"][[e["input"] for e in spec["examples"]].index(trained)]["output"] = "A new answer"
    write_spec(tmp_path / "s", spec)
    code, out = tt.json("run", path, "--resume", run)
    assert code == 0, out
    again = out["report"]["models"][0]
    assert (again["id"], again["version"]) == (model["id"], 2)
    assert digests(v1) == before  # the activated version's files, byte for byte
    code, active = tt.json("models", "active")
    assert code == 0 and (active["model"], active["version"]) == (model["id"], 1)
    assert served_answer(tt, trained) == (0, next(e["output"] for e in echo_spec()["examples"]
                                                  if e["input"] == trained))  # version 1's answer, not "A new answer"
    code, listed = tt.json("models", "history", model["id"])
    assert code == 0 and [(v["version"], v["active"]) for v in listed["versions"]] == [(1, True), (2, False)]

    # tampering with the active version's weights: both commands refuse, naming the file's digests
    assert tt.json("models", "gc")[1]["removed"] == []  # version 1 is active: kept
    weights = next(v1.rglob("table.json"))
    recorded = hashlib.sha256(weights.read_bytes()).hexdigest()
    weights.write_text(weights.read_text().replace("City", "Town"))
    changed = hashlib.sha256(weights.read_bytes()).hexdigest()
    code, out = tt.json("models", "active")
    assert code == 1 and "table.json" in out["error"]["message"] and recorded in out["error"]["message"] and changed in out["error"]["message"], out
    code, answer = served_answer(tt, trained)
    assert code == 1 and "table.json" in answer and recorded in answer and changed in answer, answer
    manifest = v1 / "artifact-manifest.json"
    activated = hashlib.sha256(manifest.read_bytes()).hexdigest()
    manifest.write_text(manifest.read_text().replace("{", "{ ", 1))
    now = hashlib.sha256(manifest.read_bytes()).hexdigest()
    for command in (("models", "active"), ("serve", "active", "--port", "0")):
        code, out = tt.json(*command)
        assert code == 1 and activated in out["error"]["message"] and now in out["error"]["message"], out

    assert tt.json("models", "activate", f"{model['id']}@2", "--force")[0] == 0
    code, gone = tt.json("models", "gc", "--dry-run")
    assert [(g["id"], g["version"]) for g in gone["removed"]] == [] and v1.exists()  # rollback returns to v1
    tt.json("models", "rollback"), tt.json("models", "rollback")
    assert tt.json("models", "activate", f"{model['id']}@2", "--force")[0] == 0
    code, gone = tt.json("models", "gc")
    assert code == 0 and [(g["id"], g["version"]) for g in gone["removed"]] == [(model["id"], 1)], gone
    assert not v1.exists() and Path(tt.json("models", "get", model["id"])[1]["path"]).is_dir()
    code, out = tt.json("models", "activate", f"{model['id']}@1", "--force")
    assert code == 2 and "removed by `tt models gc`" in out["error"]["message"]


def test_half_made_copies_of_a_killed_registration_are_swept_never_a_live_ones(tt, tmp_path):
    """A kill mid-copy leaves `.N.partial-PID/` in the model's versions folder: the next registration of that id
    and `tt models gc` remove one whose process is gone; a copy whose process is alive is left alone."""
    path = write_spec(tmp_path / "s", echo_spec())
    code, out = tt.json("run", path)
    assert code == 0, out
    versions = Path(tt.json("models", "get", out["report"]["models"][0]["id"])[1]["path"]).parent
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid names no process now
    alive = subprocess.Popen(["sleep", "600"])
    try:
        def plant(name: str) -> Path:
            (versions / name / "weights").mkdir(parents=True)
            (versions / name / "weights" / "table.json").write_text("{}")
            return versions / name

        stale, live = plant(f".2.partial-{dead.pid}"), plant(f".2.partial-{alive.pid}")
        code, out = tt.json("run", path, "--resume", out["run_dir"])  # registers the same artifact again
        assert code == 0, out
        assert not stale.exists() and live.is_dir()
        stale = plant(f".3.partial-{dead.pid}")
        code, listed = tt.json("models", "gc", "--dry-run")
        assert code == 0 and listed["half_made_copies"] == [str(stale)] and listed["removed"] == [], listed
        assert stale.is_dir()
        code, removed = tt.json("models", "gc")
        assert code == 0 and removed["half_made_copies"] == [str(stale)] and removed["removed"] == [], removed
        assert not stale.exists() and live.is_dir() and (versions / "1").is_dir()
    finally:
        alive.kill()
        alive.wait()
