"""What the adapter's warm stage server imports once before it forks stages (TT_STAGE_SERVER=1;
tt_stagekit.stageserver, docs/operations.md "Stage server"). Engine environment.

The stages below go offline as their first act (`model_source.go_offline()` at import, before transformers
is imported), so the server does the same before importing what they import: torch, transformers, PEFT and
the engine's runtime modules. `prefetch` (it may download the base) and `prepare` (no torch) are not served.

OpenMP reads its wait policy once, when torch loads it: here, in the server, not in the forked stage. This module
lives in the stages package so that importing it runs the package's `__init__` first, with its default
(`OMP_WAIT_POLICY=PASSIVE` unless the user set it), before torch loads; from runtime/ it did not, and the
served stages spun their idle threads and trained at 3-4 tokens/s on a loaded 2-core machine where a plain
stage trained at 43 (docs/performance.md, "Stage start").
"""

from tt_engine_adapter.runtime import model_source

model_source.go_offline()

import peft  # noqa: E402,F401
import torch  # noqa: E402,F401
import transformers  # noqa: E402,F401
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402,F401 (their lazy modules)

from tt_engine_adapter.runtime import config, data, generate, train  # noqa: E402,F401

SERVED_STAGES = (
    "tt_engine_adapter.stages.train",
    "tt_engine_adapter.stages.evaluate",
    "tt_engine_adapter.stages.reference",
    "tt_engine_adapter.stages.preference",
    "tt_engine_adapter.stages.reinforce",
)
