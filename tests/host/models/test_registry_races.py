"""The registry under concurrency (docs/serving.md "Versions"): registration, `tt models gc` and activation
take one lock, so two real processes, one registering new versions of a model while the other collects,
never lose a version (every version registered is in the entry, every folder on disk is one the entry
names), and an activation of a version gc removed is refused, not recorded."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

from tt_stagekit.manifest import write_manifest

ROUNDS = 25


def _artifact(folder: Path, round_: int) -> None:
    (folder / "weights").mkdir(parents=True, exist_ok=True)
    (folder / "weights" / "table.json").write_text(json.dumps({"round": round_, "pad": "x" * 4096}))
    write_manifest(folder, "adapter", "echo")


def _register_rounds(home: str, artifact: str, run_dir: str, out) -> None:
    os.environ["TT_HOME"] = home
    from tt_host.models import registry

    numbers = []
    try:
        for round_ in range(ROUNDS):
            _artifact(Path(artifact), round_)
            entry = registry.register(Path(artifact), run_id="r1", run_dir=Path(run_dir), spec_name="race",
                                      engine="echo", kind="adapter")
            numbers.append(entry["version"])
    except Exception as exc:  # a registration that fails under the race is a finding too: report it, never hang
        out.put(f"registration {len(numbers) + 1} failed: {exc!r}")
        return
    out.put(numbers)


def _collect_until(home: str, done) -> None:
    os.environ["TT_HOME"] = home
    from tt_host.models import gc

    while not done.is_set():
        gc.collect()
    gc.collect()


def test_a_registration_racing_gc_never_loses_a_version(tmp_path):
    home, artifact, run_dir = tmp_path / "home", tmp_path / "run" / "artifact", tmp_path / "run"
    artifact.mkdir(parents=True)
    context = multiprocessing.get_context("fork")
    done, out = context.Event(), context.Queue()
    collector = context.Process(target=_collect_until, args=(str(home), done))
    registrar = context.Process(target=_register_rounds, args=(str(home), str(artifact), str(run_dir), out))
    collector.start()
    registrar.start()
    try:
        numbers = out.get(timeout=600)
        registrar.join(60)
    finally:
        done.set()
        collector.join(60)
        for process in (registrar, collector):
            if process.is_alive():
                process.kill()
    assert registrar.exitcode == 0 and collector.exitcode == 0
    assert numbers == list(range(1, ROUNDS + 1)), numbers
    (entry_file,) = (home / "models").glob("*.json")
    entry = json.loads(entry_file.read_text())
    versions = {v["version"]: v for v in entry["versions"]}
    assert sorted(versions) == numbers, f"versions lost from the entry: {sorted(set(numbers) - set(versions))}"
    assert entry["version"] == ROUNDS and Path(entry["path"]).is_dir()
    on_disk = {p.name for p in Path(entry["path"]).parent.iterdir()}
    kept = {str(n) for n, v in versions.items() if not v.get("removed")}
    assert on_disk == kept, f"orphaned folders: {sorted(on_disk - kept)}, missing: {sorted(kept - on_disk)}"
    assert kept == {str(ROUNDS)}  # the last collection removed every older version


def test_an_activation_waiting_while_gc_removes_its_version_is_refused_and_records_nothing(tt, tmp_path, monkeypatch):
    """gc holds the lock and removes version 1 while `tt models activate ID@1` waits: the activation checks the
    version under the lock, so it is refused (exit 2, naming gc) and the history stays empty."""
    monkeypatch.setenv("TT_HOME", tt.env["TT_HOME"])
    from tt_host.fsutil import processes_holding
    from tt_host.models import activation, gc, registry

    artifact, run_dir = tmp_path / "run" / "artifact", tmp_path / "run"
    for round_ in range(2):
        _artifact(artifact, round_)
        entry = registry.register(artifact, run_id="r1", run_dir=run_dir, spec_name="race", engine="echo",
                                  kind="adapter")
    assert entry["version"] == 2
    lock = registry.registry_lock("the test, standing in for a gc in progress")
    with lock:
        waiting = tt.popen("models", "activate", f"{entry['id']}@1", "--force", "--json")
        start = time.monotonic()
        while waiting.poll() is None and waiting.pid not in processes_holding(lock.path):
            assert time.monotonic() - start < 600, "tt models activate neither waited for the lock nor ended"
            time.sleep(0.05)
        removed = gc.collect_locked()
        assert [(r["id"], r["version"]) for r in removed["removed"]] == [(entry["id"], 1)]
    out, err = waiting.communicate(timeout=600)
    assert waiting.returncode == 2, (out, err)
    assert "removed by `tt models gc`" in out, out  # the --json error, whatever its envelope
    assert activation.read_history() == []
