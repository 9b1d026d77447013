"""The synthesize stage end to end: the real `tt` with the echo engine, a real HTTP teacher on loopback
(tests/teacher_stub.py), the real cache on disk (docs/synthesis.md)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from conftest import echo_spec, write_spec
from process_support import wait_until
from teacher_stub import StubTeacher

from tt_host.spec.split import normalize_prompt

SECRET = "sk-test-0123-this-must-never-be-written"


def synth_spec(url: str, rows: int = 12, **synthesis) -> dict:
    spec = echo_spec(steps=2)
    spec["synthesis"] = {"teacher": {"base_url": url, "model": "stub-teacher"}, "rows": rows,
                         "inputs_per_request": 4, **synthesis}
    return spec


def run_files(run: Path) -> dict:
    return {
        "report": json.loads((run / "report.json").read_text()),
        "rows": (run / "synthesize" / "rows.jsonl").read_bytes(),
        "train_request": json.loads((run / "train" / "request.json").read_text()),
        "eval_request": json.loads((run / "evaluate" / "request.json").read_text()),
    }


def test_target_rows_kept_and_held_out_prompts_never_kept_even_when_echoed(tt, tmp_path):
    prompts = [example["input"] for example in echo_spec()["examples"]]
    with StubTeacher(echo=prompts) as stub:  # every input reply repeats every spec prompt, verbatim and re-cased
        code, out = tt.json("run", write_spec(tmp_path / "s", synth_spec(stub.url, rows=12)))
    assert code == 0, out
    files = run_files(Path(out["run_dir"]))
    shown = [body["messages"][1]["content"] for body in stub.requests if "JSON array" in body["messages"][1]["content"]]
    held_prompts = [p["messages"][1]["content"] for p in files["eval_request"]["eval_prompts"]]
    assert shown and not [text for text in shown for prompt in held_prompts if f"Input: {prompt}\n" in text]
    rows = [json.loads(line) for line in files["rows"].decode().splitlines()]
    assert len(rows) == 12 and {row["source"] for row in rows} == {"synthetic"}
    held = {normalize_prompt(p["messages"][1]["content"]) for p in files["eval_request"]["eval_prompts"]}
    assert held, "the spec holds examples out"
    kept = {normalize_prompt(row["messages"][1]["content"]) for row in rows}
    assert not kept & held
    metrics = files["report"]["metrics"]
    assert metrics["synthesize.kept"] == 12 and metrics["synthesize.dropped.held_out"] >= 2 * len(held)
    assert metrics["synthesize.dropped.training_example"] > 0
    # the training stage got the spec's training rows and the synthetic ones; evaluation only the spec's own
    trained = files["train_request"]["train_rows"]
    assert [r for r in trained if r.get("source") == "synthetic"] == rows
    assert not {normalize_prompt(r["messages"][1]["content"]) for r in trained} & held
    assert len(files["eval_request"]["eval_prompts"]) == len(held)
    assert "synthesis dropped: " in "\n".join(files["report"]["notes"])


def test_rerun_sends_nothing_and_yields_the_same_bytes(tt, tmp_path):
    with StubTeacher() as stub:
        path = write_spec(tmp_path / "s", synth_spec(stub.url))
        code, first = tt.json("run", path)
        assert code == 0, first
        sent = len(stub.requests)
        code, second = tt.json("run", path)
        assert code == 0, second
        assert len(stub.requests) == sent  # everything came from the cache
    one, two = run_files(Path(first["run_dir"])), run_files(Path(second["run_dir"]))
    assert first["run_dir"] != second["run_dir"] and one["rows"] == two["rows"]
    assert two["report"]["metrics"]["synthesize.requests"] == 0
    assert two["report"]["metrics"]["synthesize.cached"] == one["report"]["metrics"]["synthesize.requests"] == sent


def cached_bodies(spec_dir: Path) -> list[dict]:
    return [json.loads(path.read_text())["request"] for path in (spec_dir / ".tuned-tensor" / "synthesis-cache").rglob("*.json")]


def test_sigterm_keeps_what_arrived_and_resume_asks_only_the_rest(tt, tmp_path):
    with StubTeacher() as reference_stub:  # the same spec, never interrupted, for the rows it must end with
        code, reference = tt.json("run", write_spec(tmp_path / "ref", synth_spec(reference_stub.url, concurrency=2)))
        assert code == 0, reference
    with StubTeacher(hold_after=6) as stub:
        path = write_spec(tmp_path / "s", synth_spec(stub.url, concurrency=2))
        run = tmp_path / "run"
        proc = tt.popen("run", path, "--resume", run)
        wait_until(lambda: stub.held.is_set() or proc.poll() is not None, "the teacher to hold a request")
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130, proc.stderr.read()
        state = json.loads((run / "run.json").read_text())
        assert state["stages"]["synthesize"]["state"] == "interrupted"
        assert "--resume" in json.loads((run / "report.json").read_text())["resume"]
        before = cached_bodies(tmp_path / "s")
        assert 0 < len(before) <= 6
        stub.hold_after = None
        stub.release.set()
        sent = len(stub.requests)
        code, resumed = tt.json("run", path, "--resume", run)
        assert code == 0, resumed
        new = stub.requests[sent:]
    assert new and not [body for body in new if body in before]  # nothing that had arrived is asked again
    metrics = resumed["report"]["metrics"]
    assert metrics["synthesize.cached"] == len(before) and metrics["synthesize.requests"] == len(new)
    assert metrics["synthesize.requests"] + metrics["synthesize.cached"] == \
        json.loads((Path(reference["run_dir"]) / "report.json").read_text())["metrics"]["synthesize.requests"]
    rows = (run / "synthesize" / "rows.jsonl").read_text().splitlines()
    reference_rows = (Path(reference["run_dir"]) / "synthesize" / "rows.jsonl").read_text().splitlines()
    strip = lambda lines: [{k: v for k, v in json.loads(line).items() if k != "request_sha256"} for line in lines]
    assert strip(rows) == strip(reference_rows)  # the same rows (their request hashes name another port)


def test_429_then_500_are_retried_and_garbage_is_dropped_by_the_checks(tt, tmp_path):
    def answer(prompt: str) -> str:
        number = int(prompt.split("place ")[1].rstrip("?"))
        return "<<garbage>>" if number % 3 == 0 else json.dumps({"city": f"City {number}"})

    faults = [(429, {"Retry-After": "1"}, b"slow down"), (500, {}, b"internal error")]
    with StubTeacher(answer=answer, faults=faults) as stub:
        spec = synth_spec(stub.url, rows=8, concurrency=1, checks={"json_fields": ["city"], "max_chars": 200})
        code, out = tt.json("run", write_spec(tmp_path / "s", spec))
        assert stub.requests[0] == stub.requests[1] == stub.requests[2]  # the same request, retried twice
        assert stub.times[1] - stub.times[0] >= 1.0  # Retry-After was honoured
    assert code == 0, out
    metrics = out["report"]["metrics"]
    assert metrics["synthesize.retries.http_429"] == 1 and metrics["synthesize.retries.http_500"] == 1
    assert metrics["synthesize.dropped.valid_json"] > 0 and metrics["synthesize.kept"] == 8
    rows = (Path(out["run_dir"]) / "synthesize" / "rows.jsonl").read_text().splitlines()
    assert all("city" in json.loads(json.loads(line)["messages"][2]["content"]) for line in rows)
    assert "valid_json" in "\n".join(out["report"]["notes"])


def test_a_teacher_that_never_answers_fails_the_stage_naming_its_url(tt, tmp_path):
    with StubTeacher(silent=True) as stub:
        spec = synth_spec(stub.url, timeout_seconds=0.5, max_retries=1)
        code, out = tt.json("run", write_spec(tmp_path / "s", spec))
    assert code == 1, out
    assert f"{stub.url}/chat/completions" in out["error"]["message"] and "no complete answer within 0.5s" in out["error"]["message"]
    state = json.loads((Path(out["run_dir"]) / "run.json").read_text())
    assert state["stages"]["synthesize"]["state"] == "failed" and state["stages"]["train"]["state"] == "pending"


def test_the_key_is_sent_but_never_written(tt, tmp_path):
    with StubTeacher() as stub:
        path = write_spec(tmp_path / "s", synth_spec(stub.url))
        tt.env["TT_TEACHER_API_KEY"] = SECRET
        tt.env["TT_TEACHER_ORIGIN"] = stub.url.removesuffix("/v1")
        proc = tt("run", path, "--json")
        preview = tt("data", "preview", path, "--json")
    assert proc.returncode == 0 and preview.returncode == 0, proc.stderr + preview.stderr
    assert set(stub.auth) == {f"Bearer {SECRET}"}
    assert f"key from TT_TEACHER_API_KEY (sent only to TT_TEACHER_ORIGIN {tt.env['TT_TEACHER_ORIGIN']})" in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr + preview.stdout + preview.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "site" not in p.parts]
    assert any(p.name == "run.json" for p in written) and any(p.parent.name == "logs" for p in written)
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []


def test_bad_synthesis_fields_are_named(tt, tmp_path):
    spec = synth_spec("ftp://nowhere", rows=0)
    spec["synthesis"]["teacher"]["api_key_env"] = SECRET
    spec["synthesis"]["checks"] = {"regex": "(("}
    code, out = tt.json("validate", write_spec(tmp_path / "s", spec))
    assert code == 2
    assert {e["loc"] for e in out["errors"]} == {"synthesis.teacher.base_url", "synthesis.teacher.api_key_env",
                                                 "synthesis.rows", "synthesis.checks.regex"}
    assert SECRET not in json.dumps(out)


def test_foundation_sft_trains_on_the_rows_and_only_the_stages_after_it_change(tmp_path):
    """In process: the plan of a foundation spec with a synthesis block, and the request its sft stage gets."""
    from tt_engine_foundation.runtime.config import parse
    from tt_engine_foundation.stages.sft import sft_rows
    from tt_host.engines.envs import EnvInfo
    from tt_host.plugins import load_plugins
    from tt_host.runs.fingerprint import chain
    from tt_host.runs.invoke import RunCall, StageCall, stage_request
    from tt_host.runs.progress import QuietReporter
    from tt_host.runs.store import RunDir
    from tt_host.spec.loading import load_spec
    from tt_host.synthesis.rows import write_rows

    def loaded(name: str, **extra):
        spec = {"name": "adder", "engine": "foundation", "system_prompt": "Add the numbers.",
                "examples": [{"input": f"{i} plus {i}", "output": str(2 * i)} for i in range(6)],
                "foundation": {"depth": 2, "pretrain_steps": 10, "device": "cpu"}, **extra}
        path = write_spec(tmp_path / name, spec)
        found = load_spec(path, load_plugins())
        assert found.valid, found.errors
        return found

    plain = loaded("plain")
    taught = loaded("taught", synthesis={"teacher": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}, "rows": 2,
                                         "weight": 1.5})
    before = {p.stage.name: p.fingerprint for p in chain(plain.engine, plain.spec, plain.compiled)}
    plan = chain(taught.engine, taught.spec, taught.compiled)
    assert plan[0].stage.name == "synthesize"
    after = {p.stage.name: p.fingerprint for p in plan[1:]}
    assert {name for name in before if before[name] != after[name]} == {"sft", "rl", "chat_eval"}
    rows = [{"id": f"syn-{i}", "source": "synthetic", "request_sha256": "0" * 64,
             "messages": [{"role": "system", "content": taught.compiled.system_message},
                          {"role": "user", "content": f"{i} plus 100"}, {"role": "assistant", "content": str(i + 100)}]}
            for i in range(2)]
    folder = tmp_path / "run" / "synthesize"
    folder.mkdir(parents=True)
    write_rows(folder / "rows.jsonl", rows)
    completed = {"synthesize": {"dir": str(folder), "result": {"outputs": {"rows": "rows.jsonl"}}}}
    call = RunCall(taught, load_plugins(), RunDir(tmp_path / "run"), None, QuietReporter(), "d" * 64, False)
    env = EnvInfo("foundation", "k", tmp_path / "env", tmp_path / "env" / "bin" / "python", False, 0.0)
    for stage, _, fingerprint in plan[1:]:
        stage_dir = tmp_path / "run" / stage.name
        request = stage_request(StageCall(call, env, stage, fingerprint, False, completed, None), stage_dir,
                                stage_dir / "result.json")
        synthetic = [row for row in request.train_rows if row.get("source") == "synthetic"]
        assert len(synthetic) == (3 if stage.name == "sft" else 0), stage.name  # 2 rows × weight 1.5
        if stage.name == "sft":
            typed = parse(json.loads(json.dumps(request.to_json())))
            trained = sft_rows(typed)
            assert [row["id"] for row in trained[-3:]] == [row["id"] for row in synthetic]
            assert len(trained) == len(taught.compiled.train_rows) + 3


def test_a_registered_model_served_by_tt_serve_is_a_teacher(tt, tmp_path):
    """`{"model_id": ...}`: the registry names the teacher (its manifest digest is in the stage's inputs) and
    `tt serve` answers under that name. The echo model repeats what it does not know, so no input request
    gets a JSON array back: the stage fails saying so, after asking the served model."""
    code, out = tt.json("run", write_spec(tmp_path / "teacher", echo_spec(steps=1)))
    assert code == 0, out
    (model,) = out["report"]["models"]
    spec = synth_spec("unused", rows=2)
    spec["synthesis"]["teacher"] = {"model_id": "no-such-model"}
    path = write_spec(tmp_path / "s", spec)
    refused = tt("run", path)
    assert refused.returncode == 2 and "no registered model 'no-such-model'" in refused.stderr, refused.stderr
    server = tt.popen("serve", model["id"], "--port", "0", "--json")
    try:
        ready = next(e for e in map(json.loads, server.stdout) if e.get("type") == "ready")
        spec["synthesis"]["teacher"] = {"model_id": model["id"], "base_url": f"{ready['url']}/v1"}
        code, out = tt.json("run", write_spec(tmp_path / "s", spec))
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    assert code == 1 and f"the teacher {model['id']} at {ready['url']}/v1/chat/completions" in out["error"]["message"], out
    assert "bad_input_reply 3" in out["error"]["message"]
    inputs = json.loads((Path(out["run_dir"]) / "run.json").read_text())["stages"]["synthesize"]["inputs"]
    registered = json.loads((Path(tt.env["TT_HOME"]) / "models" / f"{model['id']}.json").read_text())
    assert inputs["teacher"]["manifest_sha256"] == registered["manifest_sha256"]


def test_preview_shows_the_requests_and_sample_rows_the_run_then_reuses(tt, tmp_path):
    with StubTeacher() as stub:
        path = write_spec(tmp_path / "s", synth_spec(stub.url, rows=6))
        code, nothing = tt.json("data", "preview", path, "--sample", "0")
        assert code == 0 and nothing["requests_sent"] == 0 and nothing["sample_rows"] == [] and stub.requests == []
        assert "Answer with the capital city." in nothing["inputs_request"]["messages"][1]["content"]
        assert nothing["answer_request"]["messages"][0]["content"] == "Answer with the capital city."
        code, sampled = tt.json("data", "preview", path, "--sample", "2")
        assert code == 0 and len(sampled["sample_rows"]) == 2 and sampled["requests_sent"] == len(stub.requests) > 0
        assert stub.requests[0] == sampled["inputs_request"]  # what it showed is what it sends
        code, out = tt.json("run", path)
    assert code == 0, out
    assert out["report"]["metrics"]["synthesize.cached"] == sampled["requests_sent"]
    rows = [json.loads(line) for line in (Path(out["run_dir"]) / "synthesize" / "rows.jsonl").read_text().splitlines()]
    assert rows[:2] == sampled["sample_rows"]
