"""The adapter engine's decoder, shared by the server (`serve/`) and GRPO's rollouts (`runtime/rollouts.py`).

Engine environment only; it imports nothing of the engine but `decode/` itself
(no request types, no chat rendering): the callers own their rows, budgets
and stop rules. Modules: `kvcache` (the running batch's left-padded KV cache
and the masks of one forward pass), `forward` (a model's batched prefill and
decode passes over that cache), `groups` (which admitted prompts share one
prefill pass), `picker` (each row's next token: greedy by one argmax, else
seeded temperature and top-p sampling) and `prefix` (a generation batch's
shared prompt prefix prefilled once, its cache repeated to the rows: the
held-out evaluation's `runtime/generate.py`) and `prefixstore` (prefixes'
keys and values kept across passes, least recently used evicted within a
bound in bytes: the server's prompt starts, `serve/reuse.py`).
"""
