"""Rows grown by a teacher model (docs/synthesis.md): the spec's `synthesis` block put to work, host-side.

`client.py` speaks the OpenAI chat-completions API over HTTP (stdlib urllib: the host stays torch-free and
adds no dependency) with retries, Retry-After, concurrency and rate limits and a stop; `cache.py` keeps every
answer by its request hash; `prompts.py` writes what is asked; `checks.py` judges each answer;
`generate.py` turns answers into rows, dropping duplicates and every held-out prompt; `rows.py` reads and
writes the rows and weights them for training; `teacher.py` resolves who the teacher is.
"""
