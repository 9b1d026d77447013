"""CUDA path check: bf16 autocast pretraining, CUDA RNG state in checkpoints, resume on the GPU.

Trains a small model for 20 steps on CUDA with a checkpoint at step 10, then
resumes a second trainer from that checkpoint and compares its final weights
with the uninterrupted run (CUDA kernels such as the embedding backward use
atomics, so equality is reported, not required), and checks that the
checkpoint holds the CUDA RNG state and restores it.

    python bench/foundation_cuda_check.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "foundation"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tt_engine_foundation.runtime import checkpoints as ckpt  # noqa: E402
from tt_stagekit import protocol  # noqa: E402
from tt_engine_foundation.runtime.model import config_for_depth  # noqa: E402
from tt_engine_foundation.runtime.pretrain import run_pretraining  # noqa: E402


def train(root: Path, steps: int, cfg: dict, tokens: np.ndarray):
    device = torch.device("cuda")
    model_cfg = config_for_depth(cfg["depth"], cfg["vocab_size"], cfg["sequence_length"])
    cfg = dict(cfg, pretrain_steps=steps)
    config = {"check": True, **{k: v for k, v in cfg.items() if k != "pretrain_steps"}, "total": 20}
    return run_pretraining(cfg=cfg, model_cfg=model_cfg, tokens=tokens, device=device, peak_lr=3e-3, config=config,
                           fingerprint=ckpt.config_fingerprint(config), checkpoint_dir=root / "ckpt", backup_dir=None,
                           heartbeat_path=root / "beats.jsonl")


def main() -> None:
    protocol.emit = lambda event: None
    protocol.log = lambda message, level="info": None
    cfg = dict(depth=4, vocab_size=4096, sequence_length=256, batch_size=8, gradient_accumulation_steps=2,
               weight_decay=0.1, warmup_steps=2, min_lr_ratio=0.1, gradient_clip=1.0, seed=3, bf16=True,
               log_interval_steps=5, checkpoint_interval_steps=10, checkpoint_interval_seconds=0, keep_checkpoints=5,
               compile=False)
    tokens = np.random.default_rng(0).integers(0, 4096, size=200_000).astype(np.uint16)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        # The schedule must not change between the halves: both use total 20 through the config.
        cfg20 = dict(cfg)
        model_full, state_full, _ = train(Path(a), 20, cfg20, tokens)
        meta = json.loads((Path(a) / "ckpt" / "step-000000010" / "metadata.json").read_text())
        trainer = torch.load(Path(a) / "ckpt" / "step-000000010" / "trainer-state.pt", weights_only=False)
        has_cuda_rng = "cuda" in trainer["rng"]
        # resume: copy step 10 into a fresh folder and continue to 20
        import shutil

        shutil.copytree(Path(a) / "ckpt" / "step-000000010", Path(b) / "ckpt" / "step-000000010")
        torch.cuda.manual_seed_all(12345)  # disturb; the checkpoint must restore it
        model_res, state_res, figures = train(Path(b), 20, cfg20, tokens)
        diffs = {k: (model_full.state_dict()[k].float() - v.float()).abs().max().item()
                 for k, v in model_res.state_dict().items()}
    print(json.dumps({
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "bf16_autocast": True,
        "checkpoint_step": meta["step"], "checkpoint_has_cuda_rng": has_cuda_rng,
        "resumed_from": figures["resumed_from"] is not None, "final_loss_full": round(state_full.last_loss, 5),
        "final_loss_resumed": round(state_res.last_loss, 5), "weights_identical": max(diffs.values()) == 0.0,
        "max_abs_weight_diff": max(diffs.values()),
    }))


if __name__ == "__main__":
    main()
