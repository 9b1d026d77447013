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
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

from tt_stagekit.files import atomic_write_json, new_folder
from tt_stagekit.gguf import export as gguf_export
from tt_stagekit.gguf.modelfile import ChatFormat
from tt_stagekit.manifest import MANIFEST
from tt_stagekit.protocol import run_command

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


def export(request: Mapping[str, Any]) -> Path:
    source, out = hf_export.check_request(request)
    fmt, quant = str(request.get("format", "gguf")), str(request.get("quant", "f16"))
    gguf_export.check_options(fmt, quant)
    with tempfile.TemporaryDirectory(prefix=".tt-gguf-", dir=out.parent) as tmp:
        folder = hf_export.export({**request, "out": str(Path(tmp) / "hf")})
        info = json.loads((folder / "tt-export.json").read_text(encoding="utf-8"))
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        with new_folder(out) as staging:
            entry = gguf_export.export_folder(
                folder, staging, str(fmt), str(quant), model_id=str(request.get("model_id") or source.name),
                special_ids={"bos": config["bos_token_id"], "eos": config["eos_token_id"],
                             "eot": config["eos_token_id"], "pad": config["pad_token_id"]},
                eot_tokens=[tokenizer.ASSISTANT_END], system_message=info.get("system_message"),
                system_message_sha256=info.get("system_message_sha256"),
                manifest_sha256=info["source"]["manifest_sha256"], context=info["context_length"], chat=CHAT,
                pre=pretokenizer.PRE_TOKENIZER)
            info = {**info, "kind": KINDS[str(fmt)], "gguf": entry}
            atomic_write_json(staging / "tt-export.json", info)
            write_manifest(staging, info["kind"], {
                "system_message_sha256": info["system_message_sha256"] or "", "base_model": None,
                "source_model": info["source"],
                "exported": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
    return out


def main(argv: list[str] | None = None) -> int:
    def run(request: dict[str, Any]) -> str:
        out = export(request)
        return f"export complete: {len(list(out.iterdir()))} files, listed with sha256 in {MANIFEST}"

    return run_command(run, sys.argv[1:] if argv is None else argv,
                       "python -m tt_engine_foundation.stages.export_gguf REQUEST.json")


if __name__ == "__main__":
    sys.exit(main())
