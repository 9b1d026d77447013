"""A local lm-eval task file is data (tt_stagekit.taskfiles, docs/evaluation.md): the real `tt validate` and
`tt run` refuse a task whose YAML would run code (`!function`, any custom tag), includes a file outside its
folder or asks for remote code, exit 2 naming file:line, creating nothing and running nothing; the user's own
`TT_ALLOW_TASK_CODE=1` (never the spec) lets `!function` through."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import write_spec

REVISION = "0123456789abcdef0123456789abcdef01234567"
MARKER = "task-code-ran.txt"

# A real lm-eval task (lm-evaluation-harness's own format; the shape of its `hellaswag` task) whose
# process_docs is Python beside it.
TASK = """\
task: tt_planted
dataset_path: json
dataset_kwargs:
  data_files:
    test: data.jsonl
test_split: test
process_docs: !function utils.process_docs
output_type: multiple_choice
doc_to_text: "{{text}}"
doc_to_choice: ["yes", "no"]
doc_to_target: label
metric_list:
  - metric: acc
"""


def planted(folder: Path, task: str = TASK, name: str = "task.yaml") -> Path:
    tasks = folder / "benchmarks" / "planted"
    tasks.mkdir(parents=True, exist_ok=True)
    (tasks / name).write_text(task)
    (tasks / "data.jsonl").write_text('{"text": "a", "label": 0}\n')
    (tasks / "utils.py").write_text(
        "from pathlib import Path\n"
        f"Path(__file__).with_name({MARKER!r}).write_text('ran')\n"
        "def process_docs(dataset):\n    return dataset\n")
    return tasks / name


def spec_with(folder: Path, task: str) -> Path:
    return write_spec(folder, {"name": "b", "engine": "adapter", "base_model": "org/tiny",
                               "base_model_revision": REVISION,
                               "examples": [{"input": f"q{i}", "output": f"a{i}"} for i in range(4)],
                               "evaluation": {"benchmarks": {"tasks": [{"task": task}]}}})


def test_a_function_tag_is_refused_at_validate_and_run_naming_file_and_line(tt, tmp_path):
    task = planted(tmp_path / "s")
    path = spec_with(tmp_path / "s", "benchmarks/planted/task.yaml")
    code, out = tt.json("validate", path)
    assert code == 2, out
    (error,) = [e for e in out["errors"] if e["loc"] == "evaluation.benchmarks.tasks.0.task"]
    assert f"{task}:7:" in error["msg"] and "!function" in error["msg"] and "TT_ALLOW_TASK_CODE=1" in error["msg"]
    run = tt("run", path)
    assert run.returncode == 2 and f"{task}:7:" in run.stderr, run.stderr
    assert not (tmp_path / "s" / ".tuned-tensor").exists()  # nothing created
    assert not list(tmp_path.rglob(MARKER))  # nothing ran
    tt.env["TT_ALLOW_TASK_CODE"] = "1"  # the user's own opt-in, outside the spec
    code, out = tt.json("validate", path)
    assert code == 0, out
    assert not list(tmp_path.rglob(MARKER))  # validating never runs it either


def test_other_tags_includes_outside_the_folder_and_remote_code_are_refused(tt, tmp_path):
    (tmp_path / "elsewhere.yaml").write_text("output_type: multiple_choice\n")
    cases = {
        "python tag": ("task: t\nclass: !!python/name:os.system\n", 2, "'tag:yaml.org,2002:python/name:os.system'"),
        "any custom tag": ("task: t\ndoc_to_text: !jinja '{{x}}'\n", 2, "'!jinja'"),
        "include outside": ("task: t\ninclude: ../../../elsewhere.yaml\n", 2, "outside the task folder"),
        "absolute include": (f"task: t\ninclude:\n  - {tmp_path / 'elsewhere.yaml'}\n", 3, "outside the task folder"),
        "remote code": ("task: t\ndataset_kwargs:\n  trust_remote_code: true\n", 3, "trust_remote_code"),
        "merge key hiding a tag": ("task: t\n<<: {process_docs: !function utils.process_docs}\n", 2, "merge key"),
    }
    for what, (text, line, words) in cases.items():
        folder = tmp_path / what.replace(" ", "_")
        task = planted(folder, text)
        code, out = tt.json("validate", spec_with(folder, "benchmarks/planted/task.yaml"))
        assert code == 2, (what, out)
        (error,) = [e for e in out["errors"] if e["loc"] == "evaluation.benchmarks.tasks.0.task"]
        assert f"{task}:{line}:" in error["msg"] and words in error["msg"], (what, error)
    # a tag in an included file inside the folder is found there, with its own file and line
    folder = tmp_path / "nested"
    task = planted(folder, "task: t\ninclude: base.yaml\n")
    (task.parent / "base.yaml").write_text("output_type: multiple_choice\nprocess_docs: !function utils.process_docs\n")
    code, out = tt.json("validate", spec_with(folder, "benchmarks/planted/task.yaml"))
    assert code == 2 and f"{task.parent / 'base.yaml'}:2:" in json.dumps(out), out
    assert not list(tmp_path.rglob(MARKER))


def test_a_plain_task_file_with_an_include_in_its_folder_is_valid(tt, tmp_path):
    task = planted(tmp_path / "s", "include: base.yaml\ntask: t\n")
    (task.parent / "base.yaml").write_text(TASK.replace("process_docs: !function utils.process_docs\n", ""))
    code, out = tt.json("validate", spec_with(tmp_path / "s", "benchmarks/planted/task.yaml"))
    assert code == 0, out


def test_the_users_opt_in_is_announced_at_run_start(tmp_path, monkeypatch):
    """In process: the line `tt run` prints before any stage (tt_host.runs.drive) when TT_ALLOW_TASK_CODE=1."""
    from tt_engine_adapter.plugin import ENGINE
    from tt_host.spec.benchmarks import task_code_note

    task = planted(tmp_path / "s")
    raw = json.loads(spec_with(tmp_path / "s", "benchmarks/planted/task.yaml").read_text())
    monkeypatch.setenv("TT_ALLOW_TASK_CODE", "1")
    spec = ENGINE.spec_model.model_validate(raw, context={"spec_dir": str(tmp_path / "s")})
    note = task_code_note(spec)
    assert note is not None and str(task.parent) in note and note.startswith("TT_ALLOW_TASK_CODE=1: Python code")
    monkeypatch.delenv("TT_ALLOW_TASK_CODE")
    assert task_code_note(spec) is None


MERGED = TASK.replace("process_docs: !function utils.process_docs\n", "<<: {include: inc.yaml}\n")


def test_a_merge_key_hiding_an_include_is_refused_and_its_code_never_runs(tt, tmp_path):
    """`<<: {include: inc.yaml}`: lm-eval's loader applies the merge and loads inc.yaml, whose `!function` imports
    utils.py. The real `tt validate` and `tt run` refuse the merge key (file:line), and utils.py never runs."""
    task = planted(tmp_path / "s", MERGED)
    (task.parent / "inc.yaml").write_text("process_docs: !function utils.process_docs\n")
    path = spec_with(tmp_path / "s", "benchmarks/planted/task.yaml")
    code, out = tt.json("validate", path)
    assert code == 2, out
    (error,) = [e for e in out["errors"] if e["loc"] == "evaluation.benchmarks.tasks.0.task"]
    assert f"{task}:7:" in error["msg"] and "merge key" in error["msg"], error
    run = tt("run", path)
    assert run.returncode == 2 and "merge key" in run.stderr, run.stderr
    assert not (tmp_path / "s" / ".tuned-tensor").exists() and not list(tmp_path.rglob(MARKER))


def test_only_the_exact_opt_in_value_lets_code_through(tt, tmp_path):
    planted(tmp_path / "s")
    path = spec_with(tmp_path / "s", "benchmarks/planted/task.yaml")
    for value in ("0", "true", " 1", "1 ", "yes"):
        tt.env["TT_ALLOW_TASK_CODE"] = value
        code, out = tt.json("validate", path)
        assert code == 2 and "!function" in json.dumps(out), (value, out)
    tt.env["TT_ALLOW_TASK_CODE"] = "1"
    assert tt.json("validate", path)[0] == 0
    assert not list(tmp_path.rglob(MARKER))
