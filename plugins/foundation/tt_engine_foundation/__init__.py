"""tt foundation engine: a small Llama-layout GPT trained from scratch (tokenizer, token cache, pretraining,
BPB, SFT, RL, chat evaluation).

Split by interpreter (docs/plugins.md, "Package layout"): the top level
(`plugin`, `spec`, `doctor`) is the host side (pydantic + tt_host, never torch);
`formats` is read by both sides (stdlib + tt_stagekit); `runtime` and `stages`
run only inside the engine's own environment and never import tt_host.
"""
