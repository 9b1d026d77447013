"""An OpenAI-compatible chat server for a Hugging Face causal LM, optionally with a PEFT adapter.

`python -m tt_engine_adapter.serve REQUEST.json` (see `__main__`); `tt serve`
writes the request and runs it in the adapter engine's environment. Modules:
`request` (body validation, OpenAI errors), `generation` (model, prompt),
`detokenize` (incremental text deltas), `batching` (continuous batching and
the queue, on the engine's decoder `decode/`: KV cache, masks, forward passes,
token picking), `app` (Starlette routes, limits), `guard` (Host, JSON, API
key), `protocol` (header-read timeout), `metrics` (`/metrics`).
"""

from tt_engine_adapter.runtime import bitsandbytes_gate

bitsandbytes_gate.hide_where_unusable()  # before PEFT: no GPU, no bitsandbytes import
