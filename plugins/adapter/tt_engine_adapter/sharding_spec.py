"""The host's rules for `hyperparameters.sharding` and `fsdp_cpu_offload` (pydantic-free, never torch): what a
sharded (FSDP2) train stage can do today, refused at `tt validate` naming the setting and the stage.

`sharding_error(spec)` is the first refusal for an AdapterSpec (None when the plan is one the train stage runs):

- a tuning block (`preference`, `reinforcement`): those stages train on one process holding the whole base, so a
  base that needs sharding cannot be tuned there; refused naming the stage;
- `load_in_4bit` (bitsandbytes' 4-bit weights lose their quantization state when sharded);
- `precision` "fp16" (its gradient scaler is not proven with sharded gradients): bf16 or fp32;
- `fsdp_cpu_offload` without sharding "fsdp", or on device "cpu" (nothing to offload to).
"""

from __future__ import annotations

from typing import Any, Optional

from tt_engine_adapter.formats import tuning


def sharding_error(spec: Any) -> Optional[str]:
    hp = spec.hyperparameters
    if hp.fsdp_cpu_offload and hp.sharding != "fsdp":
        return 'hyperparameters.fsdp_cpu_offload offloads FSDP shards: set hyperparameters.sharding to "fsdp", or unset it'
    if hp.fsdp_cpu_offload and spec.device == "cpu":
        return ('hyperparameters.fsdp_cpu_offload: device is "cpu", where the shards already live in host memory; '
                "unset it, or use device \"cuda\"")
    if hp.sharding != "fsdp":
        return None
    stages = tuning.tuning_stages(spec)
    if stages:
        block = tuning.tuning_block(spec)
        return (f'hyperparameters.sharding "fsdp": the {stages[-1]} stage (spec.{block}) trains on one process '
                f'holding the whole base; only the train stage is sharded so far. Use sharding "none", or run the '
                f"{block} block in a spec of its own on a base that fits one device")
    if hp.load_in_4bit:
        return ('hyperparameters.load_in_4bit: 4-bit weights are not sharded by sharding "fsdp" (their quantization '
                'state is lost); set load_in_4bit to false, or sharding to "none"')
    if hp.precision == "fp16":
        return ('hyperparameters.precision "fp16" with sharding "fsdp": its gradient scaler is not proven on sharded '
                'gradients; use "bf16" (or "fp32"), or sharding "none"')
    return None
