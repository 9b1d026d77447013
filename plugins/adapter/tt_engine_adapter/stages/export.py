"""Merge a trained LoRA adapter into its base model and save a full Hugging Face folder (engine environment).

    python -m tt_engine_adapter.stages.export REQUEST.json

REQUEST (written by `tt models export --merged`, as the engine's ModelKind declares; the same fields as
every engine's export request):

    {"source": "<run>/train/adapter", "out": "<new folder>", "model_id": "...",
     "system_message": "..." | null, "system_message_sha256": "..." | null}

The base model is the one recorded in the adapter's `tt-adapter.json`; a local
base whose content fingerprint changed since training is refused. The base is
loaded in full precision (fp32) and the LoRA deltas are merged with PEFT's
`merge_and_unload`; a quantized base (a `quantization_config` in its
config.json) is refused, because merging into quantized weights loses the
adapter's precision. The folder (weights, config, generation config,
tokenizer with its chat template, `tt-export.json`, `artifact-manifest.json`)
is built in a hidden sibling and renamed to `out`, which must not exist.
Exit 0 on success, 2 on invalid input, 1 on failure.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Mapping

from tt_engine_adapter.formats import fingerprint
from tt_engine_adapter.runtime import model_source
from tt_stagekit.files import atomic_write_json, new_folder
from tt_stagekit.protocol import InvalidInput, run_export

EXPORT_KIND = "merged"


def check_request(request: Mapping[str, Any]) -> tuple[Path, Path, dict[str, Any]]:
    for key in ("source", "out"):
        if not isinstance(request.get(key), str) or not request[key]:
            raise InvalidInput(f"export request: {key!r} must be a path string")
    adapter, out = Path(request["source"]), Path(request["out"])
    for name in ("adapter_config.json", "tt-adapter.json"):
        if not (adapter / name).is_file():
            raise InvalidInput(f"{adapter}: not a tt adapter folder ({name} is missing)")
    if out.exists():
        raise InvalidInput(f"{out} already exists; export never overwrites a folder")
    if not out.parent.is_dir():
        raise InvalidInput(f"{out.parent} does not exist")
    info = json.loads((adapter / "tt-adapter.json").read_text(encoding="utf-8"))
    base = dict(info.get("base_model") or {})
    base_path = Path(base.get("path") or "")
    if not base.get("path") or not (base_path / "config.json").is_file():
        raise InvalidInput(f"the adapter's base model {base.get('name') or base.get('path')!r} is not available at "
                         f"{base_path}; restore it (or re-run prefetch) before exporting")
    if base.get("fingerprint") and fingerprint.folder_fingerprint(base_path) != base["fingerprint"]:
        raise InvalidInput(f"the base model folder {base_path} changed since the adapter was trained "
                         "(its content fingerprint differs); merging would not reproduce the trained model")
    config = json.loads((base_path / "config.json").read_text(encoding="utf-8"))
    if config.get("quantization_config"):
        method = config["quantization_config"].get("quant_method", "unknown")
        raise InvalidInput(f"the base model {base_path} is quantized ({method}); tt merges adapters only into "
                         "full-precision weights. Point the adapter at the unquantized base model")
    message, sha = request.get("system_message"), request.get("system_message_sha256")
    if message is not None and sha and hashlib.sha256(message.encode("utf-8")).hexdigest() != sha:
        raise InvalidInput("export request: system_message does not match system_message_sha256")
    return adapter, out, {**info, "base_model": base}


def export(request: Mapping[str, Any]) -> Path:
    model_source.go_offline()
    adapter, out, info = check_request(request)
    import torch
    from peft import PeftModel

    from tt_engine_adapter.runtime import manifest

    base = info["base_model"]
    tokenizer = model_source.load_tokenizer(base["path"])
    model = model_source.load_model(base["path"], "cpu", torch.float32)
    for param in model.parameters():
        if not param.dtype.is_floating_point:
            raise InvalidInput(f"the base model {base['path']} holds non-float ({param.dtype}) weights; "
                             "it looks quantized and cannot be merged into")
    model = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)
    merged = model.merge_and_unload()
    merged.eval()

    with new_folder(out) as tmp:
        merged.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        adapter_manifest = adapter / manifest.MANIFEST
        export_info = {
            "format": 1,
            "kind": EXPORT_KIND,
            "model_id": request.get("model_id"),
            "source": {"adapter": str(adapter.resolve()), "base_model": base,
                       "manifest_sha256": fingerprint.sha256_file(adapter_manifest) if adapter_manifest.is_file()
                       else None},
            "system_message": request.get("system_message", info.get("system_message")),
            "system_message_sha256": request.get("system_message_sha256") or info.get("system_message_sha256"),
            "chat": info.get("chat"),
            "dtype": "float32",
        }
        atomic_write_json(tmp / "tt-export.json", export_info)
        manifest.write_manifest(tmp, EXPORT_KIND, base, export_info["system_message_sha256"] or "",
                                extra={"source_adapter": export_info["source"]})
    return out


def main(argv: list[str] | None = None) -> int:
    return run_export(export, argv, "python -m tt_engine_adapter.stages.export REQUEST.json")

if __name__ == "__main__":
    sys.exit(main())
