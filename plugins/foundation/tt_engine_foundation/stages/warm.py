"""What the foundation engine's warm stage server imports once before it forks stages (TT_STAGE_SERVER=1;
tt_stagekit.stageserver, docs/operations.md "Stage server"). Engine environment.

Torch, numpy and the runtime modules the stages import when they start; nothing here reads the environment,
seeds a generator or starts a thread at import (the stages do that in the child, from their request). A stage
that runs under torchrun (`nproc_per_node` × `nnodes` above 1) is never served: the host serves only a plain
`-m MODULE` start. `export` and `export_gguf` (one-shot commands) start on their own.
"""

import numpy  # noqa: F401
import torch  # noqa: F401

from tt_engine_foundation.runtime import (bpb, chat, generate, loss, model, model_io, optim, pretrain,  # noqa: F401
                                          rl, sft, token_cache, tokenizer, torchsetup)

SERVED_STAGES = (
    "tt_engine_foundation.stages.tokenizer",
    "tt_engine_foundation.stages.token_cache",
    "tt_engine_foundation.stages.pretrain",
    "tt_engine_foundation.stages.bpb",
    "tt_engine_foundation.stages.sft",
    "tt_engine_foundation.stages.rl",
    "tt_engine_foundation.stages.chat_eval",
)
