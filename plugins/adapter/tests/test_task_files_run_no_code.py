"""The gate stages' side of "a task file is data" (tt_stagekit.benchmarks, tt_stagekit.taskfiles): real
lm-evaluation-harness on the tiny Llama. A local task whose YAML says `process_docs: !function utils.process_docs`
is refused before lm-eval loads it (its utils.py, which writes a marker file, never runs), and a prompt template
that reaches Python internals (`cycler.__init__.__globals__.os`) renders in Jinja's sandbox, so it fails instead
of running a command. The host refuses both earlier (tests/host/evaluation/test_task_files_are_data.py); this
is the engine's own check, for a task file changed between `tt validate` and the stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from tt_stagekit.benchmarks import BenchmarkTask, Benchmarks, run
from tt_stagekit.protocol import StageError

MARKER = "task-code-ran.txt"
TASK = """\
task: tt_planted_{name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: data.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{text}"
doc_to_choice: ["yes", "no"]
doc_to_target: label
metric_list:
  - metric: acc
"""


def task_folder(root: Path, name: str, text: str = "{{text}}", extra: str = "") -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "data.jsonl").write_text('{"text": "a", "label": 0}\n{"text": "b", "label": 1}\n')
    (folder / "utils.py").write_text(
        "from pathlib import Path\n"
        f"Path(__file__).with_name({MARKER!r}).write_text('ran')\n"
        "def process_docs(dataset):\n    return dataset\n")
    (folder / "task.yaml").write_text(TASK.format(name=name, text=text) + extra)
    return folder / "task.yaml"


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_llama):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_llama), AutoTokenizer.from_pretrained(tiny_llama)


def test_a_function_tag_never_runs_its_code(tmp_path, model_and_tokenizer, monkeypatch):
    monkeypatch.delenv("TT_ALLOW_TASK_CODE", raising=False)
    task = task_folder(tmp_path, "function", extra="process_docs: !function utils.process_docs\n")
    model, tokenizer = model_and_tokenizer
    with pytest.raises(StageError, match=f"{task}:13: `!function 'utils.process_docs'`"):
        run(model, tokenizer, Benchmarks((BenchmarkTask(str(task)),), limit=2), "", 1, None)
    assert not (task.parent / MARKER).exists()


def test_a_template_cannot_reach_python(tmp_path, model_and_tokenizer, monkeypatch):
    monkeypatch.delenv("TT_ALLOW_TASK_CODE", raising=False)
    marker = tmp_path / "template" / MARKER
    escape = f"{{{{ cycler.__init__.__globals__.os.popen('touch {marker}').read() }}}}{{{{text}}}}"
    task = task_folder(tmp_path, "template", text=escape)
    model, tokenizer = model_and_tokenizer
    with pytest.raises(Exception, match="unsafe"):  # jinja2.exceptions.SecurityError
        run(model, tokenizer, Benchmarks((BenchmarkTask(str(task)),), limit=2), "", 1, None)
    assert not marker.exists()


def test_a_merge_key_hiding_an_include_never_runs_its_code(tmp_path, model_and_tokenizer, monkeypatch):
    """`<<: {include: inc.yaml}`: lm-eval's own loader applies the merge, loads inc.yaml and imports utils.py. The
    stage refuses the merge key before lm-eval reads the file, even with TT_ALLOW_TASK_CODE=0."""
    monkeypatch.setenv("TT_ALLOW_TASK_CODE", "0")
    task = task_folder(tmp_path, "merged", extra="<<: {include: inc.yaml}\n")
    (task.parent / "inc.yaml").write_text("process_docs: !function utils.process_docs\n")
    model, tokenizer = model_and_tokenizer
    with pytest.raises(StageError, match=f"{task}:13: a YAML merge key"):
        run(model, tokenizer, Benchmarks((BenchmarkTask(str(task)),), limit=2), "", 1, None)
    assert not (task.parent / MARKER).exists()
