"""Known-harmless third-party lines (tt_host.engines.noise.HARMLESS) are recognised, each by a pattern narrow enough
that a line naming a real failure in similar words is still shown; and a stage's noise stays in its log and off the
terminal while its errors and tt's own progress are shown (a real stage process through run_stage)."""

from __future__ import annotations

import io
import json
import sys
import textwrap

import pytest
from rich.console import Console

from tt_host.engines.noise import HARMLESS, NoiseFilter, harmless
from tt_host.engines.runner import run_stage
from tt_host.runs.progress import RichReporter

BNB = ("Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'kernels'. Please make sure you "
       "already `pip install kernels` and the kernels >= 0.11.1")
FUTURE = ("/x/.venv/lib/python3.11/site-packages/transformers/modeling_utils.py:3312: FutureWarning: "
          "`is_gradient_checkpointing` is deprecated and will be removed in v6. Use `is_activation_checkpointing` "
          "instead.")
BARS = ["Loading weights:   0%|          | 0/272 [00:00<?, ?it/s]",
        "Loading weights: 100%|██████████| 272/272 [00:00<00:00, 11692.88it/s]",
        "Writing model shards: 100%|██████████| 1/1 [00:01<00:00,  1.84s/it]",
        "Map: 100%|██████████| 16/16 [00:00<00:00, 1234.56 examples/s]"]
# (harmless line, a line in similar words that reports a real failure and must be shown)
CASES = {
    "bitsandbytes cpu kernel fallback": (BNB, [
        BNB.replace("No module named 'kernels'", "CUDA error: no kernel image is available"),
        "Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'torch'. Please make sure you "
        "already `pip install kernels` and the kernels >= 0.11.1",
        "RuntimeError: " + BNB]),
    "transformers is_gradient_checkpointing deprecation": (FUTURE, [
        FUTURE.replace("is_gradient_checkpointing", "load_in_4bit"),
        FUTURE.replace("FutureWarning", "RuntimeError"),
        FUTURE + " Traceback follows"]),
    "third-party progress bar": (BARS[1], [
        "RuntimeError: 45%|████▌     | 9/20 [00:01<00:02,  4.50it/s]",
        "Loading weights: 100%|██████████| 272/272 [00:00<00:00] Error: shard 3 is truncated",
        "Traceback (most recent call last): 100%|██| 1/1 [00:00<00:00, 1.0it/s]"]),
}


def test_every_entry_of_the_table_has_a_case():
    assert sorted(name for name, _ in HARMLESS) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_harmless_line_is_noise_and_a_real_failure_in_similar_words_is_not(name):
    line, failures = CASES[name]
    assert harmless(line) == name
    for failure in failures:
        assert harmless(failure) == "", failure


def test_every_progress_bar_shape_is_noise_and_a_warning_source_line_only_after_a_filtered_warning():
    assert all(harmless(bar) == "third-party progress bar" for bar in BARS)
    noise = NoiseFilter()
    assert noise.is_noise(FUTURE) and noise.is_noise("  warnings.warn(\n")
    assert not noise.is_noise("  warnings.warn(\n")  # after a line that was not filtered: shown
    other = NoiseFilter()
    assert not other.is_noise("/x/torch/jit/_script.py:365: DeprecationWarning: something else")
    assert not other.is_noise("  warnings.warn(")


STAGE = textwrap.dedent(f"""
    import json, sys
    print({BNB!r}, file=sys.stderr, flush=True)
    print({FUTURE!r}, file=sys.stderr, flush=True)
    print("  warnings.warn(", file=sys.stderr, flush=True)
    sys.stderr.write({BARS[0]!r} + "\\r" + {BARS[1]!r} + "\\n"); sys.stderr.flush()
    print(json.dumps({{"type": "progress", "step": 1, "total": 2, "metrics": {{"loss": 0.5}}}}), flush=True)
    print("RuntimeError: shard 3 is truncated", file=sys.stderr, flush=True)
    print(json.dumps({{"type": "progress", "step": 2, "total": 2, "metrics": {{"loss": 0.25}}}}), flush=True)
""")


def test_a_stages_noise_stays_in_its_log_and_off_the_terminal(tmp_path):
    script = tmp_path / "stage.py"
    script.write_text(STAGE)
    request = tmp_path / "request.json"
    request.write_text("{}")
    out = io.StringIO()
    shown = RichReporter(Console(file=out, force_terminal=False, width=200), verbose=True)
    events = []
    shown.stage_started("train", "training")

    def on_event(event):
        events.append(event)
        shown.event("train", event)

    outcome = run_stage(sys.executable, [str(script)], request, tmp_path, tmp_path / "stage.log", on_event)
    shown.stage_finished("train", "completed", 1.0)
    assert outcome.exit_code == 0
    log = (tmp_path / "stage.log").read_text()
    for line in (BNB, FUTURE, "  warnings.warn(", *BARS[:2], "RuntimeError: shard 3 is truncated"):
        assert line in log
    terminal = out.getvalue()
    assert "RuntimeError: shard 3 is truncated" in terminal and "train 2/2 loss=0.25" in terminal, terminal
    for word in ("Failed", "FutureWarning", "warnings.warn", "%|"):
        assert word not in terminal, terminal
    assert sum(1 for e in events if e.get("noise")) == 5 and json.dumps(events)
