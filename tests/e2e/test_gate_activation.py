"""The general-regression gate and model activation, end to end with the adapter engine on CPU.

One adapter run (tiny llama, a few LoRA steps) is shared by the module:

1. it runs with a general set whose answers are placeholders, then the set
   is rewritten so its references are the base model's own answers: the
   resume re-runs only the two evaluations, and the tuned model (which now
   answers positive/negative) fails the gate; the run still exits 0;
2. `tt models activate` refuses the model naming the gate (exit 1); `--force`
   activates it and the history records it;
3. a policy change re-runs only the report, and the gate passes;
4. `activate`, `active`, `rollback`, and `tt serve active` / `tt serve base`
   answer the official openai client with the tuned and the base model's
   evaluation answers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from adapter_support import (TT_BIN, engine_python, engine_run, ready_event, run_resumed, shared_tiny_model,
                             stage_starts, tt, tt_env, write_spec)

REPO = Path(__file__).resolve().parents[2]
GENERAL_SYSTEM = "You are a helpful assistant."
WORDS = ["gentle", "noisy", "bright", "sharp", "quiet", "heavy", "sweet", "strange"]


def _general_rows(answers: dict[str, str]) -> str:
    rows = []
    for i, word in enumerate(WORDS):
        rows.append({"id": f"g{i}", "messages": [
            {"role": "system", "content": GENERAL_SYSTEM},
            {"role": "user", "content": f"the soundtrack was {word} (general {i})"},
            {"role": "assistant", "content": answers.get(f"g{i}", "placeholder")}]})
    return "".join(json.dumps(r) + "\n" for r in rows)


def _jsonl(path: Path) -> dict[str, str]:
    return {r["id"]: r["prediction"] for r in map(json.loads, path.read_text().splitlines())}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gate-e2e")


@pytest.fixture(scope="module")
def python(home) -> str:
    return engine_python(home)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Iterator[Path]:
    with shared_tiny_model(tmp_path_factory) as model:
        yield model


@pytest.fixture(scope="module")
def gated(home, python, model) -> dict:
    folder = home / "spec"
    folder.mkdir()
    (folder / "general.jsonl").write_text(_general_rows({}))
    gate = {"general_regression": {"dataset": "general.jsonl"}}
    spec = write_spec(folder, str(model), hyperparameters={"n_epochs": 3, "max_eval_examples": 6}, evaluation=gate)
    run = home / "run"
    started = time.monotonic()
    first = run_resumed(home, spec, run)
    base_answers = {k: v for k, v in _jsonl(run / "baseline" / "predictions-general.jsonl").items() if v.strip()}
    assert len(base_answers) >= 4, base_answers
    (folder / "general.jsonl").write_text(_general_rows(base_answers))
    before = stage_starts(run)
    second = run_resumed(home, spec, run)
    print(f"gate fixture: {time.monotonic() - started:.0f}s")
    return {"home": home, "spec": spec, "run": run, "model": model, "first": first, "second": second,
            "before": before, "after": stage_starts(run), "python": python}


def test_gate_fails_on_worse_general_answers_activation_refuses_policy_reruns_report(gated):
    home, run, spec = gated["home"], gated["run"], gated["spec"]
    first = gated["first"]["general_regression"]
    assert first["status"] == "passed" and first["rows"] == len(WORDS)  # placeholder answers: both score 0
    # dataset change: both evaluations ran again, nothing else
    rerun = {name for name in gated["before"] if gated["before"][name] != gated["after"][name]}
    assert rerun == {"baseline", "candidate"}, (gated["before"], gated["after"])
    report = gated["second"]
    gate = report["general_regression"]
    assert report["status"] == "completed" and gate["status"] == "failed", gate
    assert gate["baseline"]["pass_rate"] == 1.0 and gate["candidate"]["pass_rate"] < 0.95
    assert any("pass rate" in failure for failure in gate["failures"]) and gate["regressions"]
    assert report["metrics"]["baseline.general.exact_match"] == 1.0
    markdown = (run / "report.md").read_text()
    assert "## General-regression gate" in markdown and "**failed**" in markdown and "max_pass_rate_drop" in markdown

    model_id = next(m["id"] for m in report["models"] if m["kind"] == "adapter")
    refused = tt(home, "models", "activate", model_id)
    assert refused.returncode == 1 and "general-regression gate failed" in refused.stderr, refused.stderr
    code = tt(home, "models", "active", "--json")
    assert json.loads(code.stdout)["model"] is None
    forced = tt(home, "models", "activate", model_id, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["forced"] is True
    history = json.loads(tt(home, "models", "history", "--json").stdout)["history"]
    assert [(h["action"], h["model"], h["forced"]) for h in history] == [("activate", model_id, True)]
    assert "gate failed" in history[0]["overrode"]

    # policy change: only the report is written again, and the gate now passes
    relaxed = json.loads(spec.read_text())
    relaxed["evaluation"]["general_regression"].update(max_score_drop=1.0, max_pass_rate_drop=1.0)
    spec.write_text(json.dumps(relaxed))
    before = stage_starts(run)
    report = run_resumed(home, spec, run)
    assert stage_starts(run) == before
    assert report["general_regression"]["status"] == "passed"
    assert report["general_regression"]["policy"] == {"max_score_drop": 1.0, "max_pass_rate_drop": 1.0}
    got = json.loads(tt(home, "models", "get", model_id, "--json").stdout)
    assert got["active"] is True and got["gate"]["status"] == "passed"


def _serve(home: Path, which: str) -> tuple[subprocess.Popen, dict]:
    process = subprocess.Popen([TT_BIN, "serve", which, "--port", "0", "--json"], env=tt_env(home), cwd=home,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, ready_event(process, f"tt serve {which}")


OPENAI_ASK = r"""
import json, sys
from openai import OpenAI
url, prompt = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=url + "/v1", api_key="loopback", max_retries=0)
name = client.models.list().data[0].id
reply = client.chat.completions.create(model=name, messages=[{"role": "user", "content": prompt}],
                                       temperature=0, max_tokens=6)
print(json.dumps({"model": name, "answer": reply.choices[0].message.content.strip()}))
"""


def openai_python() -> str:
    """The adapter project's test environment (runtime + dev groups, so the official openai client), the one
    scripts/test builds; users' engine environments carry runtime dependencies only."""
    from tt_host.engines.uv import uv_binary

    project = REPO / "plugins" / "adapter"
    python = project / ".venv" / "bin" / "python"
    if not python.exists():
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([uv_binary(), "sync", "--locked", "--quiet", "--project", str(project), "--group", "runtime",
                        "--python", base, "--no-python-downloads"], env=env, check=True, timeout=1800)
    return str(python)


def _ask(gated: dict, which: str, prompt: str) -> dict:
    client = openai_python()
    process, ready = _serve(gated["home"], which)
    try:
        proc = engine_run(client, gated["home"], "-c", OPENAI_ASK, ready["url"], prompt)
        return {"ready": ready, **json.loads(proc.stdout.strip().splitlines()[-1])}
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def test_activate_active_rollback_and_serve_active_and_base(gated):
    home, run = gated["home"], gated["run"]
    model_id = next(m["id"] for m in gated["second"]["models"] if m["kind"] == "adapter")
    back = json.loads(tt(home, "models", "rollback", "--json").stdout)
    assert back["model"] is None and back["base_of"] == model_id
    state = json.loads(tt(home, "models", "active", "--json").stdout)
    assert state["model"] is None and state["base_of"] == model_id
    assert "base model of" in tt(home, "models", "active").stdout
    again = tt(home, "models", "activate", model_id, "--json")  # the gate passes now: no --force
    assert again.returncode == 0 and json.loads(again.stdout)["gate"] == "passed", again.stderr
    assert json.loads(tt(home, "models", "active", "--json").stdout)["model"] == model_id
    assert tt(home, "models", "rollback", "--json").returncode == 0
    assert tt(home, "models", "rollback", "--json").returncode == 1  # nothing left to roll back
    assert tt(home, "models", "activate", model_id, "--json").returncode == 0

    # the held-out prompt the evaluations answered; served with the spec's system message as they were
    prompt = json.loads((run / "candidate" / "request.json").read_text())["eval_prompts"][0]
    user = prompt["messages"][1]["content"]
    active = _ask(gated, "active", user)
    assert active["model"] == active["ready"]["model"] == model_id
    assert active["answer"] == _jsonl(run / "candidate" / "predictions.jsonl")[prompt["id"]]
    base = _ask(gated, "base", user)
    assert base["model"] == f"{model_id}-base"
    assert base["answer"] == _jsonl(run / "baseline" / "predictions.jsonl")[prompt["id"]]
