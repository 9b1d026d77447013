"""Export a foundation model as GGUF for llama.cpp, or as GGUF plus an Ollama Modelfile (engine environment).

    python -m tt_engine_foundation.stages.export_gguf REQUEST.json

REQUEST is the export request of tt_engine_foundation.stages.export plus `format` ("gguf" or "ollama") and
`quant` (f32, f16, bf16, q8_0, q4_0). The Hugging Face export is made first in a temporary folder, then
written as `model.gguf` by tt_stagekit.gguf (checked on the probe text; a tokenizer trained before tt used
llama.cpp's qwen2 split is refused, naming the strings that differ). `out` holds `model.gguf`, for Ollama a
`Modelfile`, `tt-export.json` (with a `gguf` entry) and `artifact-manifest.json`.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any, Mapping

from tt_stagekit.gguf import export as gguf_export
from tt_stagekit.gguf.modelfile import ChatFormat
from tt_stagekit.protocol import run_export

from tt_engine_foundation.formats import pretokenizer
from tt_engine_foundation.runtime import tokenizer
from tt_engine_foundation.runtime.model_io import write_manifest
from tt_engine_foundation.stages import export as hf_export

KINDS = {"gguf": "foundation-gguf", "ollama": "foundation-ollama"}

# runtime.chat.render as text pieces (the Hugging Face export's CHAT_TEMPLATE renders the same)
CHAT = ChatFormat(head=tokenizer.BOS, generation=tokenizer.ASSISTANT_START, roles={
    "system": (tokenizer.SYSTEM_START, tokenizer.SYSTEM_END),
    "user": (tokenizer.USER_START, tokenizer.USER_END),
    "assistant": (tokenizer.ASSISTANT_START, tokenizer.ASSISTANT_END),
})


def _engine_fields(folder: Path, info: Mapping[str, Any], config: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """The special ids from the export's config; one end-of-turn token; the pre-tokenizer tt trains with."""
    return {"special_ids": {"bos": config["bos_token_id"], "eos": config["eos_token_id"],
                            "eot": config["eos_token_id"], "pad": config["pad_token_id"]},
            "eot_tokens": [tokenizer.ASSISTANT_END], "context": info["context_length"], "chat": CHAT,
            "pre": pretokenizer.PRE_TOKENIZER}


def _write_manifest(folder: Path, info: Mapping[str, Any]) -> None:
    write_manifest(folder, info["kind"], {
        "system_message_sha256": info["system_message_sha256"] or "", "base_model": None,
        "source_model": info["source"],
        "exported": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})


def export(request: Mapping[str, Any]) -> Path:
    source, out = hf_export.check_request(request)
    return gguf_export.export_through_hf(request, out, hf_export=hf_export.export, kinds=KINDS,
                                         default_model_id=source.name, engine_fields=_engine_fields,
                                         write_manifest=_write_manifest)


def main(argv: list[str] | None = None) -> int:
    return run_export(export, argv, "python -m tt_engine_foundation.stages.export_gguf REQUEST.json")


if __name__ == "__main__":
    sys.exit(main())
