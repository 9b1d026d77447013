"""tt adapter engine: LoRA fine-tuning of a Hugging Face causal LM with PEFT.

Split by interpreter (docs/plugins.md, "Package layout"): the top level
(`plugin`, `spec`, `lengthcheck`, `memory_estimate`) is the light host side
(pydantic + tt_host); `formats` is read by both sides (stdlib + tt_stagekit);
`runtime`, `stages` and `serve` run only inside the engine's own environment and
never import tt_host.
"""

__version__ = "0.1.0"
