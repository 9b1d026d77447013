"""GGUF export shared by tt engines: a Hugging Face model folder written as one GGUF file for llama.cpp/Ollama.

Runs in an engine environment only: `gguf`, `numpy`, `safetensors` and `tokenizers` are imported inside the
functions that need them, so importing this package stays stdlib-only (as the rest of tt_stagekit).

- `pretok`: the llama.cpp pre-tokenizers tt writes (name -> split regex) and which one a tokenizer.json uses.
- `vocab`: the tokenizer fields (tokens, merges, token types, special ids), rebuilt from a GGUF file too.
- `probe`: the probe text and the token-id check that refuses a GGUF that tokenizes differently.
- `tensors`: llama.cpp's architecture, hyperparameters and tensor layout (Q/K permutation) and quantization.
- `writer`: `write_gguf` (the file, metadata and provenance) and `read_back` (what a reader finds).
- `modelfile`: the chat format as Ollama's TEMPLATE and the Modelfile (stdlib).
- `export`: `export_folder`, what an engine's export stage calls once it has a Hugging Face folder.
"""
