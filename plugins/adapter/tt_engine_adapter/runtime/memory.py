"""Memory savers for training: gradient checkpointing, 4-bit (QLoRA) base preparation, the fp16 gradient scaler.

`prepare_base` readies the loaded base model before LoRA wraps it:
`hyperparameters.load_in_4bit` runs PEFT's `prepare_model_for_kbit_training`
(norms and head in fp32, input gradients on) and `gradient_checkpointing`
turns on transformers' non-reentrant activation recomputation (same loss and
gradients, activations recomputed in the backward pass instead of kept).
`grad_scaler` is a torch GradScaler when training computes in fp16 (GPUs
without bf16), else None.
"""

from __future__ import annotations

from typing import Any, Optional

from tt_engine_adapter.runtime.config import AdapterSettings

CHECKPOINTING = {"use_reentrant": False}


def prepare_base(model: Any, hp: AdapterSettings) -> Any:
    model.config.use_cache = False
    if hp.load_in_4bit:
        from peft import prepare_model_for_kbit_training

        return prepare_model_for_kbit_training(model, use_gradient_checkpointing=hp.gradient_checkpointing,
                                               gradient_checkpointing_kwargs=CHECKPOINTING)
    if hp.gradient_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=CHECKPOINTING)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=CHECKPOINTING)
    return model


def load_dtype(dtype: Any, hp: AdapterSettings) -> Any:
    """The dtype the weights are loaded in: fp16 compute keeps fp32 master weights (autocast + scaler)."""
    import torch

    return torch.float32 if dtype == torch.float16 and not hp.load_in_4bit else dtype


def grad_scaler(device: str, dtype: Any) -> Optional[Any]:
    import torch

    return torch.amp.GradScaler(device) if dtype == torch.float16 else None
