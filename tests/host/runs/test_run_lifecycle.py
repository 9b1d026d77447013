"""Runs: locking, SIGTERM forwarding and resume, fingerprints that refuse stale work, failures, the host never imports torch."""

import json
import re
import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import echo_spec, write_spec
from echo_run_support import stage_pids, train_step
from example_copy_support import tracked_copy
from process_support import held, signal_pending, wait_until


def test_layout_permissions_and_report(tt, tmp_path):
    path = write_spec(tmp_path / "s", echo_spec(steps=2))
    code, out = tt.json("run", path)
    assert code == 0, out
    run = Path(out["run_dir"])
    assert run.parent == tmp_path / "s" / ".tuned-tensor" / "runs"
    for name in ("run.json", "spec.json", "report.json", "report.md", "logs/train.log", "train/result.json"):
        assert (run / name).is_file(), name
    assert (run.stat().st_mode & 0o777) == 0o700 and ((run / "run.json").stat().st_mode & 0o777) == 0o600
    report = json.loads((run / "report.json").read_text())
    assert {"engine", "status", "stages", "metrics"} <= set(report)
    assert report["status"] == "completed" and report["metrics"]["candidate.count"] == 3  # held out: 0, 1, 9
    assert "report-train-loss.svg" in (run / "report.md").read_text()
    code, models = tt.json("models", "list")
    assert len(models["models"]) == 1
    model_id = models["models"][0]["id"]
    listed = tt("models", "list").stdout  # when it was registered and its run's held-out figures
    registered = models["models"][0]["versions"][-1]["registered_at"][:10]
    row = next(line for line in listed.splitlines() if model_id[:12] in line)
    assert registered in row and re.search(r"\d/3 · \d\.\d\d", listed), listed
    assert tt("models", "verify", model_id).returncode == 0
    table = Path(models["models"][0]["path"]) / "table.json"
    table.write_bytes(table.read_bytes().replace(b"City", b"Town", 1))
    bad = tt("models", "verify", model_id)
    assert bad.returncode == 1 and "table.json" in bad.stderr


def test_second_process_refused_and_sigterm_interrupts_resumably(tt, tmp_path):
    """The first run's stage is held still (SIGSTOP) once it has run two steps, so the run cannot end first: a
    second `tt` that waited for the run lock instead of refusing would still wait at its 60 s timeout. The
    forwarded SIGTERM reaches the held stage (pending); let go, it stops at its step boundary."""
    path = write_spec(tmp_path / "s", echo_spec(steps=400, step_seconds=0.05))
    run = tmp_path / "run"
    first = tt.popen("run", path, "--resume", run)
    wait_until(lambda: train_step(run) >= 2 or first.poll() is not None, "two training steps")
    assert first.poll() is None, first.stderr.read()
    (stage,) = stage_pids(run)
    with held(stage):
        second = tt("run", path, "--resume", run, timeout=60)
        assert second.returncode == 2 and "in use by pid" in second.stderr, second.stderr
        first.send_signal(signal.SIGTERM)
        wait_until(lambda: signal_pending(stage, signal.SIGTERM), "tt to forward SIGTERM to the stage")
    assert first.wait(timeout=120) == 130
    state = json.loads((run / "run.json").read_text())
    assert state["status"] == "interrupted" and state["stages"]["train"]["state"] == "interrupted"
    stopped_at = train_step(run)
    assert 2 <= stopped_at < 400
    assert "stopped at step" in (run / "logs" / "train.log").read_text()
    # resume with fewer steps than done would change train's inputs: refused, nothing changed
    before = (run / "run.json").read_bytes()
    changed = write_spec(tmp_path / "s", echo_spec(steps=400, step_seconds=0.05, learning_rate=0.5), "changed.json")
    refused = tt("run", changed, "--resume", run)
    assert refused.returncode == 2 and "learning_rate" in refused.stderr and "new run directory" in refused.stderr
    assert (run / "run.json").read_bytes() == before
    # a harmless change (step speed is not a train input) resumes from the saved step
    fast = write_spec(tmp_path / "s", echo_spec(steps=400, step_seconds=0.0), "fast.json")
    code, out = tt.json("run", fast, "--resume", run)
    assert code == 0, out
    assert f"resuming at step {stopped_at}" in (run / "logs" / "train.log").read_text()


def test_completed_stages_are_skipped_and_changed_finished_work_refused(tt, tmp_path):
    path = write_spec(tmp_path / "s", echo_spec(steps=2))
    run = tmp_path / "run"
    assert tt("run", path, "--resume", run).returncode == 0
    log_size = (run / "logs" / "train.log").stat().st_size
    again = tt("run", path, "--resume", run)
    assert again.returncode == 0 and "train: completed earlier with the same inputs, verified, reused" in again.stderr
    assert (run / "logs" / "train.log").stat().st_size == log_size  # the stage did not run again
    state = json.loads((run / "run.json").read_text())
    assert {name: s["state"] for name, s in state["stages"].items()} == {
        "prepare": "completed", "train": "completed", "evaluate": "completed", "baseline": "skipped"}  # echo.baseline off
    spec = echo_spec(steps=3)
    refused = tt("run", write_spec(tmp_path / "s", spec, "more.json"), "--resume", run)
    assert refused.returncode == 2 and "steps" in refused.stderr
    spec = echo_spec(steps=2)
    spec["examples"].append({"input": "one more", "output": "x"})
    refused = tt("run", write_spec(tmp_path / "s", spec, "rows.json"), "--resume", run)
    assert refused.returncode == 2 and "changed: examples" in refused.stderr


def test_tampered_result_is_rerun_not_trusted(tt, tmp_path):
    path = write_spec(tmp_path / "s", echo_spec(steps=2))
    run = tmp_path / "run"
    assert tt("run", path, "--resume", run).returncode == 0
    result = run / "evaluate" / "result.json"
    result.write_text(result.read_text().replace("predictions.jsonl", "predictions.jsonl "))
    code, out = tt.json("run", path, "--resume", run)
    assert code == 0 and json.loads(result.read_text())["predictions"] == "predictions.jsonl"


def test_failed_stage_keeps_earlier_work_and_resumes_after_fix(tt, tmp_path):
    run = tmp_path / "run"
    code, out = tt.json("run", write_spec(tmp_path / "s", echo_spec(steps=3, fail_at_step=2)), "--resume", run)
    assert code == 1 and out["status"] == "failed" and "failing on purpose" in out["error"]["message"]
    assert out["report"]["stages"]["prepare"]["state"] == "completed"
    prepare_result = (run / "prepare" / "result.json").stat().st_mtime_ns
    code, out = tt.json("run", write_spec(tmp_path / "s", echo_spec(steps=3)), "--resume", run)
    assert code == 0, out
    assert (run / "prepare" / "result.json").stat().st_mtime_ns == prepare_result


def test_a_stage_that_ignores_sigterm_is_killed_after_the_grace_period(tt, tmp_path):
    """TT_STAGE_GRACE_SECONDS=2: the stage ignores the forwarded SIGTERM, the host kills its group after 2 s
    (bound stated: not before 2 s, and well within 60 s on a loaded machine); the run ends interrupted."""
    tt.env["TT_STAGE_GRACE_SECONDS"] = "2"
    run = tmp_path / "run"
    proc = tt.popen("run", write_spec(tmp_path / "s", echo_spec(steps=100000, step_seconds=0.02, ignore_stop=True)),
                    "--resume", run)
    wait_until(lambda: train_step(run) >= 2 or proc.poll() is not None, "two training steps")
    assert proc.poll() is None, proc.stderr.read()
    assert stage_pids(run)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    elapsed = time.monotonic() - signalled
    assert code == 130, proc.stderr.read()
    assert 2 <= elapsed < 60, elapsed
    assert not stage_pids(run), "the stage outlived the grace period"
    assert json.loads((run / "run.json").read_text())["stages"]["train"]["state"] == "interrupted"


HEAVY = ("torch", "transformers", "tokenizers", "numpy", "safetensors", "peft")
AUDIT = """import atexit, json, os, site, sys
site.addsitedir(os.environ["TT_TEST_HOST_SITE"])  # its .pth files: the editable plugins and observers
def _report():
    if "tt_host" in sys.modules:  # the host process only (stages run without PYTHONPATH)
        import importlib.util
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
        installed = sorted(m for m in {heavy!r} if importlib.util.find_spec(m) is not None)
        plugins = sorted(m for m in sys.modules if m.startswith(("tt_engine_", "tt_observer_")) and "." not in m)
        path = os.path.join(os.environ["TT_TEST_IMPORT_AUDIT"], f"{{os.getpid()}}.json")
        with open(path, "w") as out:
            json.dump({{"argv": sys.argv, "imported": heavy, "installed": installed, "plugins": plugins}}, out)
atexit.register(_report)
"""
SHIPPED = {"tt_engine_adapter", "tt_engine_foundation", "tt_observer_mlflow", "tt_observer_tensorboard",
           "tt_observer_wandb"}


def test_host_never_imports_torch_even_where_torch_is_installed(tt, tmp_path):
    """`tt doctor` of a foundation spec, `tt run`, `tt models export` and `tt serve` of the echo engine, run by
    the adapter environment's Python (torch, transformers, numpy installed) with the host's packages first on
    its path and every shipped plugin and observer importable (the host venv's .pth files): no heavy module is
    ever in the host's sys.modules (recorded at exit by a sitecustomize), and the shipped plugins were loaded."""
    import sysconfig

    code, prepared = tt.json("engines", "prepare", "adapter")
    assert code == 0, prepared
    audit = tmp_path / "audit"
    audit.mkdir()
    (audit / "sitecustomize.py").write_text(AUDIT.format(heavy=HEAVY))
    host_site = sysconfig.get_paths()["purelib"]
    repo = Path(__file__).resolve().parents[3]
    env = dict(tt.env, TT_TEST_IMPORT_AUDIT=str(audit), TT_TEST_HOST_SITE=host_site,
               PYTHONPATH=os.pathsep.join([str(audit), tt.env["PYTHONPATH"], host_site, str(repo)]))
    host = [prepared["python"], "-c", "import sys; from tt_host.cli.main import main; sys.argv[0] = 'tt'; main()"]

    def host_tt(*args):
        proc = subprocess.run([*host, *map(str, args), "--json"], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=600)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    foundation = tmp_path / "foundation-spec"
    tracked_copy("examples/foundation", foundation)
    code, out = host_tt("doctor", foundation / "tunedtensor.json")
    assert {"ok", "checks"} <= set(out), out
    code, out = host_tt("run", write_spec(tmp_path / "s", echo_spec(steps=2)), "--resume", tmp_path / "run")
    assert code == 0, out
    code, out = host_tt("models", "export", tmp_path / "run", tmp_path / "exported")
    assert code == 0, out
    server = subprocess.Popen([*host, "serve", str(tmp_path / "run"), "--port", "0", "--json"], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = next((e for e in map(json.loads, server.stdout) if e.get("type") == "ready"), None)
        assert ready is not None, server.stderr.read()
    finally:
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 130
    reports = [json.loads(p.read_text()) for p in sorted(audit.glob("*.json"))]
    assert len(reports) == 4, reports
    assert any("doctor" in report["argv"] for report in reports), reports
    for report in reports:
        assert {"torch", "numpy", "transformers"} <= set(report["installed"]), report  # they could be imported
        assert SHIPPED <= set(report["plugins"]), report  # and every shipped plugin's host side was loaded
        assert report["imported"] == [], report


def test_stage_that_rejects_its_input_ends_the_run_with_exit_2(tt, tmp_path):
    code, out = tt.json("run", write_spec(tmp_path / "s", echo_spec(reject_input=True)), "--resume", tmp_path / "run")
    assert code == 2 and out["status"] == "failed" and "reject_input" in out["error"]["message"], out
