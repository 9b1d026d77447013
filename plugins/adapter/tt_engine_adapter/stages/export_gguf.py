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

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional

from tt_stagekit.files import atomic_write_json, new_folder
from tt_stagekit.gguf import export as gguf_export
from tt_stagekit.gguf import modelfile
from tt_stagekit.manifest import MANIFEST
from tt_stagekit.protocol import InvalidInput, run_command

from tt_engine_adapter.stages import export as hf_export

KINDS = {"gguf": "merged-gguf", "ollama": "merged-ollama"}


def chat_format(tokenizer) -> modelfile.ChatFormat:
    """The model's chat template as Modelfile pieces, rendered the way tt trains and serves (runtime.chat)."""
    from tt_engine_adapter.runtime import chat

    try:
        return modelfile.derive(lambda messages, generation: chat._apply(tokenizer, messages, generation))
    except modelfile.ChatFormatError as exc:
        raise InvalidInput(f"cannot write an Ollama Modelfile for this model: {exc}") from None


def _token_id(tokenizer, token: Optional[str]) -> Optional[int]:
    if not token:
        return None
    index = tokenizer.convert_tokens_to_ids(token)
    return index if isinstance(index, int) and index != tokenizer.unk_token_id else None


def export(request: Mapping[str, Any]) -> Path:
    _, out, _ = hf_export.check_request(request)
    fmt, quant = str(request.get("format", "gguf")), str(request.get("quant", "f16"))
    gguf_export.check_options(fmt, quant)
    with tempfile.TemporaryDirectory(prefix=".tt-gguf-", dir=out.parent) as tmp:
        folder = hf_export.export({**request, "out": str(Path(tmp) / "hf")})
        from tt_engine_adapter.runtime import manifest, model_source

        info = json.loads((folder / "tt-export.json").read_text(encoding="utf-8"))
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        tokenizer = model_source.load_tokenizer(str(folder))
        end_of_turn = (info.get("chat") or {}).get("end_of_turn_token") or tokenizer.eos_token
        eot_tokens = list(dict.fromkeys(t for t in (end_of_turn, tokenizer.eos_token) if t))
        with new_folder(out) as staging:
            entry = gguf_export.export_folder(
                folder, staging, fmt, quant, model_id=str(request.get("model_id") or out.name),
                special_ids={"bos": tokenizer.bos_token_id, "eos": _token_id(tokenizer, tokenizer.eos_token),
                             "eot": _token_id(tokenizer, end_of_turn), "pad": tokenizer.pad_token_id},
                eot_tokens=eot_tokens, system_message=info.get("system_message"),
                system_message_sha256=info.get("system_message_sha256"),
                manifest_sha256=info["source"]["manifest_sha256"],
                context=int(config.get("max_position_embeddings") or 0),
                chat=chat_format(tokenizer) if fmt == "ollama" else None)
            info = {**info, "kind": KINDS[fmt], "gguf": entry}
            atomic_write_json(staging / "tt-export.json", info)
            manifest.write_manifest(staging, info["kind"], info["source"]["base_model"],
                                    info["system_message_sha256"] or "", extra={"source_adapter": info["source"]})
    return out


def main(argv: list[str] | None = None) -> int:
    def run(request: dict[str, Any]) -> str:
        out = export(request)
        return f"export complete: {len(list(out.iterdir()))} files, listed with sha256 in {MANIFEST}"

    return run_command(run, sys.argv[1:] if argv is None else argv,
                       "python -m tt_engine_adapter.stages.export_gguf REQUEST.json")


if __name__ == "__main__":
    sys.exit(main())
