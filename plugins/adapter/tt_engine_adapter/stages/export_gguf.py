"""Export a LoRA adapter merged into its base as GGUF for llama.cpp, or GGUF plus an Ollama Modelfile (engine env).

    python -m tt_engine_adapter.stages.export_gguf REQUEST.json

REQUEST is the export request of tt_engine_adapter.stages.export plus `format` ("gguf" or "ollama") and
`quant` (f32, f16, bf16, q8_0, q4_0). The merged Hugging Face export is made first in a temporary folder
(tt_engine_adapter.stages.export: full precision, the recorded base checked), then written as `model.gguf` by
tt_stagekit.gguf, which checks the tokenizer on the probe text. For Ollama the Modelfile's TEMPLATE is
derived from the model's own chat template, rendered as training renders it (thinking off), and accepted
only when it renders a longer conversation identically. `out` holds `model.gguf`, for Ollama a `Modelfile`,
`tt-export.json` (with a `gguf` entry) and `artifact-manifest.json`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_stagekit.gguf import export as gguf_export
from tt_stagekit.gguf import modelfile
from tt_stagekit.protocol import InvalidInput, run_export

from tt_engine_adapter.stages import export as hf_export

KINDS = {"gguf": "merged-gguf", "ollama": "merged-ollama"}


def chat_format(tokenizer) -> modelfile.ChatFormat:
    """The model's chat template as Modelfile pieces, rendered the way tt trains and serves (runtime.chat)."""
    from tt_engine_adapter.runtime import chat

    try:
        source = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else None
        return modelfile.derive(lambda messages, generation: chat._apply(tokenizer, messages, generation), source)
    except modelfile.ChatFormatError as exc:
        raise InvalidInput(f"cannot write an Ollama Modelfile for this model: {exc}") from None


def _token_id(tokenizer, token: Optional[str]) -> Optional[int]:
    if not token:
        return None
    index = tokenizer.convert_tokens_to_ids(token)
    return index if isinstance(index, int) and index != tokenizer.unk_token_id else None


def _engine_fields(folder: Path, info: Mapping[str, Any], config: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """The merged model's special ids, end-of-turn tokens, context and (Ollama) chat format, from its tokenizer."""
    from tt_engine_adapter.runtime import model_source

    tokenizer = model_source.load_tokenizer(str(folder))
    end_of_turn = (info.get("chat") or {}).get("end_of_turn_token") or tokenizer.eos_token
    return {"special_ids": {"bos": tokenizer.bos_token_id, "eos": _token_id(tokenizer, tokenizer.eos_token),
                            "eot": _token_id(tokenizer, end_of_turn), "pad": tokenizer.pad_token_id},
            "eot_tokens": list(dict.fromkeys(t for t in (end_of_turn, tokenizer.eos_token) if t)),
            "context": int(config.get("max_position_embeddings") or 0),
            "chat": chat_format(tokenizer) if fmt == "ollama" else None}


def _write_manifest(folder: Path, info: Mapping[str, Any]) -> None:
    from tt_engine_adapter.runtime import manifest

    manifest.write_manifest(folder, info["kind"], info["source"]["base_model"], info["system_message_sha256"] or "",
                            extra={"source_adapter": info["source"]})


def export(request: Mapping[str, Any]) -> Path:
    _, out, _ = hf_export.check_request(request)
    return gguf_export.export_through_hf(request, out, hf_export=hf_export.export, kinds=KINDS,
                                         default_model_id=out.name, engine_fields=_engine_fields,
                                         write_manifest=_write_manifest)


def main(argv: list[str] | None = None) -> int:
    return run_export(export, argv, "python -m tt_engine_adapter.stages.export_gguf REQUEST.json")


if __name__ == "__main__":
    sys.exit(main())
