"""Write a Hugging Face model folder as one GGUF file, and read back what a GGUF reader finds in it.

The metadata holds llama.cpp's hyperparameters and tokenizer keys, the chat template exactly as the folder
has it, the end-of-turn token, and tt's own keys (`tt.*`): the model id, the compiled system message and its
sha256, the end-of-turn tokens and the source model's manifest sha256 (provenance).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from tt_stagekit.gguf import tensors, vocab

TT_KEYS = ("tt.model_id", "tt.system_message", "tt.system_message_sha256", "tt.source.manifest_sha256",
           "tt.end_of_turn_tokens", "tt.quant")


def chat_template(folder: Path) -> Optional[str]:
    """The folder's chat template: tokenizer_config.json's, or chat_template.jinja (transformers 5)."""
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = config.get("chat_template")
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    return template if isinstance(template, str) else None


def load_state(folder: Path) -> dict[str, Any]:
    from safetensors.numpy import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise tensors.LayoutError(f"{folder}: no *.safetensors weights")
    state: dict[str, Any] = {}
    for path in files:
        state.update(load_file(str(path)))
    return state


def write_gguf(folder: Path, path: Path, quant: str, *, name: str, special_ids: Mapping[str, Optional[int]],
               eot_tokens: Sequence[str], tt_meta: Mapping[str, Optional[str]], pre: Optional[str] = None) -> vocab.Vocab:
    """Write `path` from the Hugging Face `folder`; returns the vocabulary written.

    special_ids: bos, eos, eot, pad ids (None: not written). tt_meta: the `tt.*` string keys.
    """
    import gguf

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    hyper = tensors.hyperparameters(config)
    words = vocab.from_tokenizer_json(json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")),
                                      hyper.vocab_size, pre)
    if not words.pre:
        raise vocab.VocabError("no llama.cpp pre-tokenizer matches the tokenizer's split")
    writer = gguf.GGUFWriter(str(path), hyper.arch)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    writer.add_file_type(tensors.file_type(quant))
    if quant in ("q8_0", "q4_0"):
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(hyper.context)
    writer.add_embedding_length(hyper.hidden)
    writer.add_block_count(hyper.layers)
    writer.add_feed_forward_length(hyper.intermediate)
    writer.add_head_count(hyper.heads)
    writer.add_head_count_kv(hyper.kv_heads)
    writer.add_key_length(hyper.head_dim)
    writer.add_value_length(hyper.head_dim)
    writer.add_rope_dimension_count(hyper.head_dim)
    writer.add_rope_freq_base(hyper.rope_theta)
    writer.add_layer_norm_rms_eps(hyper.rms_eps)
    writer.add_vocab_size(len(words.tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(words.pre)
    writer.add_token_list(words.tokens)
    writer.add_token_types(words.token_types)
    writer.add_token_merges(words.merges)
    for key, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                     ("eot", writer.add_eot_token_id), ("pad", writer.add_pad_token_id)):
        if special_ids.get(key) is not None:
            add(int(special_ids[key]))
    writer.add_add_bos_token(False)  # the chat template writes BOS itself, as the Hugging Face export's does
    template = chat_template(folder)
    if template is not None:
        writer.add_chat_template(template)
    for key, value in tt_meta.items():
        if value is not None:
            writer.add_string(key, value)
    writer.add_array("tt.end_of_turn_tokens", list(eot_tokens))
    writer.add_string("tt.quant", quant)
    for tensor_name, array in tensors.gguf_tensors(hyper, load_state(folder)):
        data, kind = tensors.encode(array, quant)
        writer.add_tensor(tensor_name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return words


def field_value(reader, key: str) -> Any:
    """One metadata value of a GGUFReader (None when absent)."""
    found = reader.get_field(key)
    return None if found is None else found.contents()


def read_vocab(path: Path):
    """(tokens, token types, merges, pre) as a GGUF reader finds them."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return (field_value(reader, "tokenizer.ggml.tokens"), field_value(reader, "tokenizer.ggml.token_type"),
            field_value(reader, "tokenizer.ggml.merges") or [], field_value(reader, "tokenizer.ggml.pre"))
