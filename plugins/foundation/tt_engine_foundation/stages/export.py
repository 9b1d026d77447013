"""Export a foundation model folder as a standard Hugging Face Llama folder (runs in the engine environment).

    python -m tt_engine_foundation.stages.export REQUEST.json

REQUEST is a JSON object written by the host (`tt models export`, `tt serve`):

    {"source": "<run>/sft/model", "out": "<new folder>", "model_id": "...",
     "system_message": "..." | null, "system_message_sha256": "..." | null}

`out` must not exist. The export is built in a hidden sibling folder and
renamed into place only when complete. It holds:

- `config.json`: a transformers `LlamaConfig` with the model's exact sizes,
  rope_theta, rms_norm_eps, untied embeddings and the bos/eos/pad ids;
- `model.safetensors`: the weights under their HF names, contiguous fp32;
- `tokenizer.json` (the trained byte-level BPE), `tokenizer_config.json` with
  a chat template that renders exactly the prompt the engine trains on,
  `special_tokens_map.json`, `generation_config.json`;
- `tt-export.json`: where it came from and the spec's system message;
- `artifact-manifest.json` (docs/protocol.md) listing every file.

Nothing needs `trust_remote_code`. Events are JSON lines on stdout; exit 0 on
success, 2 on invalid input, 1 on failure.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Mapping

from tt_stagekit.files import atomic_write_json, file_sha256, new_folder
from tt_stagekit.protocol import InvalidInput, StageError, run_export
from tt_stagekit.manifest import MANIFEST

from tt_engine_foundation.runtime import tokenizer
from tt_engine_foundation.runtime.model_io import write_manifest

EXPORT_KIND = "foundation-hf"

# Renders exactly runtime.chat.render / render_prompt: BOS, then each turn between its
# start/end special tokens; the generation prompt is <|assistant_start|>.
CHAT_TEMPLATE = (
    "{{ '" + tokenizer.BOS + "' }}"
    "{% for message in messages %}"
    "{% if message['content'] is not string %}"
    "{{ raise_exception('message content must be a string') }}"
    "{% elif message['role'] == 'system' %}"
    "{{ '" + tokenizer.SYSTEM_START + "' + message['content'] + '" + tokenizer.SYSTEM_END + "' }}"
    "{% elif message['role'] == 'user' %}"
    "{{ '" + tokenizer.USER_START + "' + message['content'] + '" + tokenizer.USER_END + "' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ '" + tokenizer.ASSISTANT_START + "' + message['content'] + '" + tokenizer.ASSISTANT_END + "' }}"
    "{% else %}"
    "{{ raise_exception('unknown chat role: ' + message['role']) }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '" + tokenizer.ASSISTANT_START + "' }}{% endif %}"
)

ADDITIONAL_SPECIAL = [tokenizer.SYSTEM_START, tokenizer.SYSTEM_END, tokenizer.USER_START, tokenizer.USER_END, tokenizer.ASSISTANT_START]


def tokenizer_files(tok, max_length: int) -> dict[str, dict[str, Any]]:
    """tokenizer_config.json, special_tokens_map.json contents for the trained tokenizer."""
    added = {}
    for token in tokenizer.SPECIAL_TOKENS:
        added[str(tokenizer.special_id(tok, token))] = {
            "content": token, "lstrip": False, "rstrip": False, "normalized": False,
            "single_word": False, "special": True,
        }
    specials = {"bos_token": tokenizer.BOS, "eos_token": tokenizer.ASSISTANT_END, "pad_token": tokenizer.PAD}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        **specials,
        "additional_special_tokens": list(ADDITIONAL_SPECIAL),
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "padding_side": "left",
        "model_input_names": ["input_ids", "attention_mask"],
        "chat_template": CHAT_TEMPLATE,
    }
    return {"tokenizer_config.json": config,
            "special_tokens_map.json": {**specials, "additional_special_tokens": list(ADDITIONAL_SPECIAL)}}


def _plain_tokenizer_json(source: Path) -> bytes:
    """The trained tokenizer.json, with tt's 'never split specials from text' switch left to the loader.

    tt encodes message text with special tokens disabled and inserts them by
    id; a Hugging Face tokenizer must recognise them in the rendered chat
    template, so the export never asks for them to be split.
    """
    data = json.loads(source.read_text(encoding="utf-8"))
    if isinstance(data.get("added_tokens"), list):
        for entry in data["added_tokens"]:
            if entry.get("content") in tokenizer.SPECIAL_TOKENS:
                entry["special"] = True
                entry["normalized"] = False
    data.pop("encode_special_tokens", None)
    return (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def check_request(request: Mapping[str, Any]) -> tuple[Path, Path]:
    for key in ("source", "out"):
        if not isinstance(request.get(key), str) or not request[key]:
            raise InvalidInput(f"export request: {key!r} must be a path string")
    source, out = Path(request["source"]), Path(request["out"])
    if not (source / "tt-model.json").is_file() or not (source / "model.safetensors").is_file():
        raise InvalidInput(f"{source}: not a foundation model folder (needs tt-model.json and model.safetensors)")
    if not (source / "tokenizer.json").is_file():
        raise InvalidInput(f"{source}: tokenizer.json is missing")
    if out.exists():
        raise InvalidInput(f"{out} already exists; export never overwrites a folder")
    if not out.parent.is_dir():
        raise InvalidInput(f"{out.parent} does not exist")
    message, sha = request.get("system_message"), request.get("system_message_sha256")
    if message is not None:
        if not isinstance(message, str):
            raise InvalidInput("export request: system_message must be a string or null")
        if sha and hashlib.sha256(message.encode("utf-8")).hexdigest() != sha:
            raise InvalidInput("export request: system_message does not match system_message_sha256")
    return source, out


def export(request: Mapping[str, Any]) -> Path:
    """Write the HF folder described in the module docstring; returns `out`."""
    import torch
    from safetensors.torch import load_file, save_file

    from tt_engine_foundation.runtime.model import GPT, ModelConfig, hf_config

    source, out = check_request(request)
    meta = json.loads((source / "tt-model.json").read_text(encoding="utf-8"))
    cfg = ModelConfig(**meta["model"])
    tok = tokenizer.load(source / "tokenizer.json")
    ids = {"bos": tokenizer.special_id(tok, tokenizer.BOS), "eos": tokenizer.special_id(tok, tokenizer.ASSISTANT_END), "pad": tokenizer.special_id(tok, tokenizer.PAD)}
    if (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) != (ids["bos"], ids["eos"], ids["pad"]):
        raise StageError(f"{source}: the model's special token ids {cfg} do not match its tokenizer {ids}")
    if tok.get_vocab_size(with_added_tokens=True) > cfg.vocab_size:
        raise StageError(f"{source}: the tokenizer has more tokens than the model's vocabulary")

    state = load_file(str(source / "model.safetensors"))
    with torch.device("meta"):  # names and shapes only, no memory
        reference = GPT(cfg).state_dict()
    expected = set(reference)
    if set(state) != expected:
        missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
        raise StageError(f"{source}/model.safetensors: parameter names differ (missing {missing[:3]}, extra {extra[:3]})")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(reference[name].shape):
            raise StageError(f"{source}/model.safetensors: {name} has shape {tuple(tensor.shape)}, "
                             f"the config says {tuple(reference[name].shape)}")
    weights = {name: tensor.detach().to("cpu", torch.float32).contiguous() for name, tensor in sorted(state.items())}

    with new_folder(out) as tmp:
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        atomic_write_json(tmp / "config.json", hf_config(cfg))
        atomic_write_json(tmp / "generation_config.json", {
            "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "pad_token_id": cfg.pad_token_id,
            "do_sample": False, "max_length": cfg.max_position_embeddings,
        })
        (tmp / "tokenizer.json").write_bytes(_plain_tokenizer_json(source / "tokenizer.json"))
        for name, content in tokenizer_files(tok, cfg.max_position_embeddings).items():
            atomic_write_json(tmp / name, content)
        source_manifest = source / MANIFEST
        info = {
            "format": 1,
            "kind": EXPORT_KIND,
            "model_id": request.get("model_id"),
            "source": {
                "path": str(source.resolve()),
                "stage": meta.get("stage"),
                "manifest_sha256": file_sha256(source_manifest) if source_manifest.is_file() else None,
            },
            "system_message": request.get("system_message"),
            "system_message_sha256": request.get("system_message_sha256") or meta.get("system_message_sha256"),
            "chat": {"end_of_turn_token": tokenizer.ASSISTANT_END, "pad_token": tokenizer.PAD, "add_special_tokens": False},
            "context_length": cfg.max_position_embeddings,
        }
        atomic_write_json(tmp / "tt-export.json", info)
        write_manifest(tmp, EXPORT_KIND, {
            "system_message_sha256": info["system_message_sha256"] or "",
            "base_model": None,
            "source_model": info["source"],
            "exported": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        })
    return out


def main(argv: list[str] | None = None) -> int:
    return run_export(export, argv, "python -m tt_engine_foundation.stages.export REQUEST.json")

if __name__ == "__main__":
    sys.exit(main())
