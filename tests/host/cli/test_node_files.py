"""The Node CLI 0.13's own files and command lines through tt (docs/migrating.md says what each does).

The files are Node's shipped examples (tests/fixtures/node/, their commit named in its README); the command lines
are its README's, in the order a user types them. Runs use the echo test engine; the adapter's specs are only
validated (host venv, nothing downloaded). A test per command checks the `--json` keys docs/json.md lists, and one
parses every command line docs/migrating.md quotes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from conftest import echo_spec, write_spec
from node_spec_support import COMMIT, node_init_spec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "node"
DOCS = Path(__file__).resolve().parents[3] / "docs"
NOTED = ("storeRoot", "artifactRoot")


def node_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "node"
    shutil.copytree(FIXTURES, folder)
    return folder


def warned_keys(out: dict, config: Path) -> list[str]:
    return [w["loc"].split(":", 1)[1] for w in out["warnings"] if w["loc"].startswith(f"{config}:")]


def test_nodes_example_configs_are_accepted_each_key_warned_once(tt, tmp_path):
    folder = node_folder(tmp_path)
    spec = folder / "smoke-spec.json"
    for name, keys in (("local-runner.json", 11), ("dry-runner.json", 6), ("spark-runner.json", 5)):
        code, out = tt.json("validate", spec, "--config", folder / name)
        assert code == 0, (name, out)
        warned = warned_keys(out, folder / name)
        assert len(warned) == len(set(warned)) == keys and set(NOTED) <= set(warned), (name, warned)
    # dry-runner.json's dryRun: true makes `tt run` a dry run: it previews every stage and creates nothing
    code, out = tt.json("run", spec, "--config", folder / "dry-runner.json")
    assert code == 0 and out["dry_run"] is True and out["ok"] is True, out
    assert not (folder / ".tuned-tensor").exists() and not (folder / ".tt-local").exists()


def test_nodes_init_scaffold_is_refused_before_anything_is_created(tt, tmp_path):
    folder = node_folder(tmp_path)
    shutil.copy(folder / "init-spec.json", folder / "tunedtensor.json")
    before = sorted(folder.rglob("*"))
    for command in ("validate", "run"):
        code, out = tt.json(command, folder / "tunedtensor.json")
        assert code == 2 and out["ok"] is False and out["error"]["exit_code"] == 2, out
        named = {e["loc"] for e in out["errors"]}
        assert named == {"system_prompt", "examples.0.input", "examples.0.output", "examples.1.input",
                         "examples.1.output"}, out["errors"]
        assert all("scaffold" in e["msg"] and "edit the spec" in e["msg"] for e in out["errors"]), out["errors"]
    assert sorted(folder.rglob("*")) == before
    hosted = {"name": "My Agent", "system_prompt": "You are a helpful assistant.", "base_model": "org/tiny-model",
              "base_model_revision": COMMIT, "examples": [
                  {"input": "Hello", "output": "Hi! How can I help you today?"},
                  {"input": "Summarize this update: The launch moved to Friday.",
                   "output": "The launch is now scheduled for Friday."}]}
    write_spec(tmp_path / "hosted", hosted)
    code, out = tt.json("validate", tmp_path / "hosted" / "tunedtensor.json")
    assert code == 2 and {e["loc"] for e in out["errors"]} >= {"name", "system_prompt", "examples.0.input",
                                                               "examples.1.input"}, out["errors"]


def test_a_spec_that_would_evaluate_nothing_is_refused_naming_what_to_add(tt, tmp_path):
    row = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "hello"}]}
    (tmp_path / "train.jsonl").write_text(json.dumps(row) + "\n")
    spec = {"name": "prebuilt", "system_prompt": "Be brief.", "base_model": "org/tiny-model",
            "base_model_revision": COMMIT, "dataset_prebuilt": {"training": "train.jsonl"}}
    write_spec(tmp_path, spec)
    code, out = tt.json("validate")
    assert code == 2 and out["errors"][0]["loc"] == "datasets.test", out
    assert "nothing would be evaluated" in out["errors"][0]["msg"] and "datasets.test" in out["errors"][0]["msg"]
    (tmp_path / "test.jsonl").write_text(json.dumps(row).replace('"hi"', '"hey"') + "\n")
    write_spec(tmp_path, {**spec, "dataset_prebuilt": {"training": "train.jsonl", "test": "test.jsonl"}})
    code, out = tt.json("validate")
    assert code == 0, out


def _echo_project(tt, folder: Path) -> str:
    """An echo project as Node's README leaves it after `tt run`: the run's id."""
    write_spec(folder, {**echo_spec(steps=2, baseline=True), "id": "22222222-2222-4222-8222-222222222222"})
    (folder / "local-runner.json").write_text(json.dumps({"evaluation": {"timeoutMs": 600000}}))
    code, ran = tt.json("run", "tunedtensor.json")
    assert code == 0, ran
    return ran


def test_nodes_readme_command_lines_run_through_tt(tt, tmp_path):
    project = tmp_path / "support-adapter"
    project.mkdir()
    tt.cwd = project
    # Quick start, as Node's README types it (the adapter's spec: validate only)
    assert tt("init", "--name", "Support Adapter", "--model", "Qwen/Qwen3.5-2B", "--profile", "spark").returncode == 0
    assert json.loads((project / "tunedtensor.json").read_text())["name"] == "Support Adapter"
    assert json.loads((project / "local-runner.json").read_text())["evaluation"]["timeoutMs"] == 1800000
    assert tt("validate", "tunedtensor.json").returncode == 2  # the placeholders first ("Edit the generated ...")
    shutil.rmtree(project)
    project.mkdir()
    ran = _echo_project(tt, project)
    assert ran["run_id"] and ran["model_id"] == ran["report"]["models"][0]["id"], ran
    lines = [  # (argv, exit) in the README's order
        (["doctor", "tunedtensor.json"], 0),
        (["validate", "tunedtensor.json"], 0),
        (["models", "prefetch", "tunedtensor.json"], 2),  # the echo spec has no hub base model to fetch
        (["models", "verify-base", "tunedtensor.json"], 2),
        (["runs", "report", ran["run_id"]], 0),
        (["models", "verify", ran["model_id"]], 0),
        (["models", "serve", ran["model_id"], "--config", "local-runner.json", "--print-command"], 0),
        (["serve", "base", "--spec", "tunedtensor.json", "--print-command"], 2),  # nothing active yet
        (["runs", "list"], 0), (["models", "list"], 0), (["models", "active"], 0), (["status"], 0),
        (["runs"], 0), (["models"], 0), (["-V"], 0), (["--version"], 0), (["local", "info"], 0),
        (["run", "tunedtensor.json", "--quiet", "--dry-run"], 0), (["run", "tunedtensor.json", "--verbose", "--dry-run"], 0),
        (["pipeline", "init", "--file", "pipeline.json"], 0),
        (["pipeline", "validate", "--file", "pipeline.json"], 0),
        (["--json", "pipeline", "plan", "--file", "pipeline.json"], 0),
        (["--json", "pipeline", "run", "--dry-run", "--file", "pipeline.json", "--only", "baseline"], 0),
        (["--json", "pipeline", "run", "--file", "pipeline.json", "--spec", "tunedtensor.json", "--config",
          "local-runner.json"], 0),
    ]
    for argv, code in lines:
        proc = tt(*argv)
        assert proc.returncode == code, (argv, proc.stdout[:1500], proc.stderr[-1500:])
        assert "Traceback" not in proc.stderr, (argv, proc.stderr)
        if "--json" in argv:
            json.loads(proc.stdout)


def test_json_keys_per_command(tt, tmp_path):
    ran = _echo_project(tt, tmp_path)
    for key in ("ok", "status", "exit_code", "run_dir", "error", "report", "run_id", "model_id", "model_ids",
                "report_path", "artifact_dir", "behavior_spec_id"):
        assert key in ran, key
    assert ran["behavior_spec_id"] == "22222222-2222-4222-8222-222222222222" and ran["error"] is None
    assert Path(ran["report_path"]).is_file() and Path(ran["artifact_dir"]) == Path(ran["run_dir"])
    checks = {
        ("validate",): ("ok", "valid", "engine", "spec_path", "errors", "warnings", "train_count", "eval_count",
                        "input_path", "config_path", "behavior_spec_id", "base_model", "dry_run"),
        ("doctor",): ("ok", "error", "checks", "config_path"),
        ("init", "--output", "new/tunedtensor.json"): ("ok", "spec", "path", "id", "name", "base_model",
                                                       "config_path"),
        ("serve", ran["model_id"], "--print-command", "--temperature", "0.2", "--top-p", "0.9"):
            ("ok", "model_id", "url", "command", "settings"),
        ("models", "verify", ran["model_id"]): ("ok", "error", "id", "problems"),
        ("runs", "get", ran["run_id"]): (),
        ("runs", "list"): ("runs",),
        ("models", "list"): ("models",),
        ("models", "active"): (),
        ("pipeline", "init", "--file", "p.json"): ("ok", "file", "name"),
        ("pipeline", "validate", "--file", "p.json"): ("ok", "valid", "pipeline"),
        ("run", "--dry-run"): ("ok", "error", "dry_run", "run_dir", "stages"),
    }
    for argv, keys in checks.items():
        code, out = tt.json(*argv)
        assert code == 0, (argv, out)
        assert not set(keys) - set(out), (argv, sorted(set(keys) - set(out)))
        if argv[0] == "serve":
            assert out["settings"]["default_temperature"] == 0.2 and out["settings"]["default_top_p"] == 0.9, out
    failures = [("run", "missing.json"), ("validate", "missing.json"), ("models", "get", "nope"), ("runs", "get", "nope"),
                ("serve", "nope", "--print-command"), ("run", "--bogus"), ("nope",), ("--bogus",),
                ("pipeline", "validate", "-f", "x"),
                ("serve", ran["model_id"], "--print-command", "--temperature", "3")]
    for argv in failures:
        code, out = tt.json(*argv)
        assert code == 2 and out["ok"] is False, (argv, out)
        assert set(out["error"]) == {"code", "message", "exit_code"} and out["error"]["exit_code"] == 2, (argv, out)
    code, out = tt.json("models", "verify-base", "org/absent")
    assert code == 1 and out["ok"] is False and out["error"]["exit_code"] == 1, out
    # a spec path where Node gave one: its base model at its revision, and Node's input_path
    snapshot = tmp_path / "hf" / "models--org--tiny-model" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"weights")
    tt.env["HF_HUB_CACHE"] = str(tmp_path / "hf")
    adapter = write_spec(tmp_path / "adapter", {**node_init_spec(), "base_model_revision": COMMIT})
    code, out = tt.json("models", "verify-base", adapter)
    assert code == 0 and out["ok"] is True and out["error"] is None, out
    assert out["input_path"] == str(adapter) and out["repo"] == "org/tiny-model" and out["commit"] == COMMIT, out


def _quoted_lines(text: str) -> list[list[str]]:
    """Each `tt ...` command line the page quotes in backticks, alternatives (a|b) and optional parts expanded."""
    lines = []
    for quoted in re.findall(r"`(tt [^`]+)`", text):
        if "..." in quoted or "…" in quoted:
            continue
        words = quoted.replace("[", " ").replace("]", " ").split()
        options = [[]]
        for word in words:
            choices = word.split("|") if "|" in word and not word.startswith("-") else [word]
            options = [o + [c] for o in options for c in choices]
        lines += [o[1:] for o in options]
    return lines


def test_every_command_line_docs_migrating_quotes_parses():
    import typer

    from tt_host.cli.main import app
    from tt_host.cli.nodeargs import rewrite

    root = typer.main.get_command(app)
    lines = _quoted_lines((DOCS / "migrating.md").read_text(encoding="utf-8"))
    assert len(lines) > 40, len(lines)
    broken = []
    for line in lines:
        args, command, name = rewrite(line), root, "tt"
        try:
            while True:
                ctx = command.make_context(name, list(args), resilient_parsing=False)
                rest = list(getattr(ctx, "_protected_args", [])) + list(ctx.args)
                if not hasattr(command, "resolve_command") or not rest:
                    break
                name, command, args = command.resolve_command(ctx, rest)
                assert command is not None, line
        except Exception as exc:  # click's usage errors, typer's exit for a group without a command
            if type(exc).__name__ not in ("Exit",):
                broken.append(f"`tt {' '.join(line)}`: {exc}")
    assert not broken, "docs/migrating.md quotes command lines that do not parse:\n" + "\n".join(broken)
