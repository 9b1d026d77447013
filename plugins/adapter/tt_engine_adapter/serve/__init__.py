"""An OpenAI-compatible chat server for a Hugging Face causal LM, optionally with a PEFT adapter.

`python -m tt_engine_adapter.serve REQUEST.json` (see `__main__`); `tt serve`
writes the request and runs it in the adapter engine's environment. Modules:
`request` (body validation, OpenAI errors), `generation` (model, prompt,
token picking), `detokenize` (incremental text deltas), `batching`
(continuous batching and the queue), `kvcache` (the batch's KV cache, masks),
`app` (Starlette routes, limits), `guard` (Host, JSON, API key), `protocol`
(header-read timeout), `metrics` (`/metrics`).
"""
