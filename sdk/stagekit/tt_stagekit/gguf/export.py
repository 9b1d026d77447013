"""`export_folder`: a Hugging Face model folder written as a GGUF export (format "gguf") or an Ollama one ("ollama").

The engine's export stage (`export_through_hf`) makes the Hugging Face folder (its own export), then calls this
with what only it knows: the special token ids, the end-of-turn tokens, the chat format (for Ollama) and the provenance. The
GGUF file is written, read back with `gguf`'s reader and its tokenizer checked on the probe text against the
folder's tokenizer.json (tt_stagekit.gguf.probe); a difference refuses the export, naming the strings, and
deletes what was written. Ollama's folder adds a Modelfile whose TEMPLATE renders the same chat format.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from tt_stagekit.files import atomic_write_json, new_folder
from tt_stagekit.gguf import modelfile, pretok, probe, tensors, vocab, writer
from tt_stagekit.protocol import InvalidInput

FORMATS = ("gguf", "ollama")
GGUF_NAME = "model.gguf"


def check_options(fmt: str, quant: str) -> None:
    """InvalidInput naming the field for a format or quant tt does not write (before any work is done)."""
    if fmt not in FORMATS:
        raise InvalidInput(f"export request: format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if quant not in tensors.QUANTS:
        raise InvalidInput(f"export request: quant must be one of {', '.join(tensors.QUANTS)}, not {quant!r}")


def closest_pre(data: Mapping[str, Any], vocab_size: int, texts: Sequence[str]) -> str:
    """The pre-tokenizer name to write: the exact match, else the one that differs on the fewest probe strings."""
    from tokenizers import Tokenizer

    words = vocab.from_tokenizer_json(data, vocab_size)
    if words.pre:
        return words.pre
    source = Tokenizer.from_str(json.dumps(data))
    counts = {name: len(probe.differing(source, vocab.rebuilt_tokenizer(words.tokens, words.token_types,
                                                                         words.merges, name), texts))
              for name in pretok.PRE_TOKENIZERS}
    return min(counts, key=lambda name: counts[name])


def check_tokenizer(folder: Path, gguf_path: Path, specials: Sequence[str], source_split: Optional[str]) -> None:
    """Refuse (InvalidInput naming the strings) when the written GGUF tokenizes the probe text differently."""
    from tokenizers import Tokenizer

    tokens, types, merges, pre = writer.read_vocab(gguf_path)
    rebuilt = vocab.rebuilt_tokenizer(tokens, types, merges, pre)
    source = Tokenizer.from_file(str(folder / "tokenizer.json"))
    differ = probe.differing(source, rebuilt, probe.probe_texts(specials))
    if differ:
        raise InvalidInput(probe.refusal(differ, pre, source_split))


def export_folder(folder: Path, out: Path, fmt: str, quant: str, *, model_id: str, special_ids: Mapping[str, Optional[int]],
                  eot_tokens: Sequence[str], system_message: Optional[str], system_message_sha256: Optional[str],
                  manifest_sha256: Optional[str], context: int, chat: Optional[modelfile.ChatFormat],
                  pre: Optional[str] = None) -> dict[str, Any]:
    """Write the GGUF (and for "ollama" the Modelfile) into the existing folder `out`; returns tt-export.json's
    `gguf` entry. `pre`: the llama.cpp pre-tokenizer the engine trains its tokenizers with (checked like any
    other); None: the one whose split the tokenizer.json has, else the closest on the probe text. InvalidInput for a bad format or quant, a model llama.cpp's layout cannot hold, a tokenizer
    that would tokenize differently, or (Ollama) a chat template a Modelfile cannot express."""
    check_options(fmt, quant)
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    text = None
    if fmt == "ollama":
        if chat is None:
            raise InvalidInput("this model has no chat format to write as an Ollama TEMPLATE")
        try:
            text = modelfile.modelfile(GGUF_NAME, chat, system_message, eot_tokens, context)
        except modelfile.ChatFormatError as exc:
            raise InvalidInput(f"cannot write an Ollama Modelfile: {exc}") from None
    gguf_path = out / GGUF_NAME
    try:
        words = vocab.from_tokenizer_json(data, int(config.get("vocab_size") or 0))
        specials = list(words.specials)
        pre = pre or closest_pre(data, int(config.get("vocab_size") or 0), probe.probe_texts(specials))
        writer.write_gguf(folder, gguf_path, quant, name=model_id, special_ids=special_ids, eot_tokens=eot_tokens,
                          pre=pre, tt_meta={"tt.model_id": model_id, "tt.system_message": system_message,
                                            "tt.system_message_sha256": system_message_sha256,
                                            "tt.source.manifest_sha256": manifest_sha256})
        check_tokenizer(folder, gguf_path, specials, words.source_split)
    except (tensors.LayoutError, vocab.VocabError) as exc:
        gguf_path.unlink(missing_ok=True)
        raise InvalidInput(f"cannot write GGUF: {exc}") from None
    except BaseException:
        gguf_path.unlink(missing_ok=True)
        raise
    entry: dict[str, Any] = {"file": GGUF_NAME, "quant": quant, "pre_tokenizer": pre, "end_of_turn_tokens": list(eot_tokens)}
    if text is not None:
        (out / "Modelfile").write_text(text, encoding="utf-8")
        entry["ollama_name"] = modelfile.ollama_name(model_id)  # the host prints `ollama create NAME -f OUT/Modelfile`
    return entry


def export_through_hf(request: Mapping[str, Any], out: Path, *, hf_export: Callable[[Mapping[str, Any]], Path],
                      kinds: Mapping[str, str], default_model_id: str,
                      engine_fields: Callable[[Path, Mapping[str, Any], Mapping[str, Any], str], Mapping[str, Any]],
                      write_manifest: Callable[[Path, Mapping[str, Any]], None]) -> Path:
    """An engine's GGUF / Ollama export stage: `hf_export` (the engine's Hugging Face export) into a temporary
    folder beside `out`, then `export_folder` into the new folder `out` (written whole or not at all) with what
    only the engine knows, `engine_fields(folder, tt_export_info, config, fmt)`: special_ids, eot_tokens,
    context, chat and optionally pre. Writes tt-export.json (its kind from `kinds[fmt]`, a `gguf` entry) and
    the manifest (`write_manifest(folder, info)`). Returns `out`."""
    fmt, quant = str(request.get("format", "gguf")), str(request.get("quant", "f16"))
    check_options(fmt, quant)
    with tempfile.TemporaryDirectory(prefix=".tt-gguf-", dir=out.parent) as tmp:
        folder = hf_export({**request, "out": str(Path(tmp) / "hf")})
        info = json.loads((folder / "tt-export.json").read_text(encoding="utf-8"))
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        fields = engine_fields(folder, info, config, fmt)
        with new_folder(out) as staging:
            entry = export_folder(folder, staging, fmt, quant, model_id=str(request.get("model_id") or default_model_id),
                                  system_message=info.get("system_message"),
                                  system_message_sha256=info.get("system_message_sha256"),
                                  manifest_sha256=info["source"]["manifest_sha256"], **fields)
            info = {**info, "kind": kinds[fmt], "gguf": entry}
            atomic_write_json(staging / "tt-export.json", info)
            write_manifest(staging, info)
    return out
