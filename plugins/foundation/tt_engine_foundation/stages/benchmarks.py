"""lm-eval benchmarks for the foundation's gate stages (`chat_eval`, `general_baseline`), in the engine environment.

lm-evaluation-harness drives transformers models, so the stage's model folder
is exported exactly as `tt models export` does (stages.export: a Hugging Face
Llama folder with the chat template that renders the engine's prompt), into a
temporary folder under the stage directory, and loaded from there with
transformers; tt_stagekit.benchmarks then scores it as the adapter engine's
stages score theirs (chat template, the spec's compiled system message). The
candidate is the model `chat_eval` answers with (RL, else SFT); the baseline
is the model before SFT (this run's pretrained model, or `foundation.init_model`)
— the "did SFT cost general ability" question (docs/evaluation.md).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tt_stagekit import protocol
from tt_stagekit.benchmarks import go_offline, score as score_benchmarks

from tt_engine_foundation.runtime.config import FoundationRequest

BATCH = 16


def score(request: FoundationRequest, folder: Path, device: Any, metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Export `folder`, load the export with transformers and return its lm-eval scores (result.json `benchmarks`);
    the seconds they took go into `metrics`."""
    benchmarks = request.spec.evaluation.benchmarks
    go_offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tt_engine_foundation.stages.export import export

    system = request.system_message
    with tempfile.TemporaryDirectory(prefix=".benchmark-export-", dir=request.stage_dir) as tmp:
        out = export({"source": str(folder), "out": str(Path(tmp) / "hf"), "model_id": None,
                      "system_message": system or None})
        tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True)
        model = model.to(device).eval()
        protocol.log(f"scoring the Hugging Face export of {folder} on {len(benchmarks.tasks)} benchmark task(s)")
        return score_benchmarks(metrics, request.stage, model, tokenizer, benchmarks, system, BATCH,
                                request.cfg.sequence_length)
