"""tt adapter engine: LoRA fine-tuning of a Hugging Face causal LM with PEFT.

`plugin` is the light host-side module (pydantic + tt_host). `runtime` and
`stages` run only inside the engine's own environment and never import tt_host.
"""

__version__ = "0.1.0"
