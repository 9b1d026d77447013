"""The foundation tokenizer's pre-tokenizer: llama.cpp's "qwen2" split, digits one at a time (docs/foundation.md).

Read by runtime/tokenizer.py (the split it trains with) and by plugin.py (the tokenizer stage's inputs, so a
run directory whose tokenizer was trained with another split is never reused as if it were this one).
"""

from tt_stagekit.gguf.pretok import PRE_TOKENIZERS

PRE_TOKENIZER = "qwen2"
SPLIT_PATTERN = PRE_TOKENIZERS[PRE_TOKENIZER]
