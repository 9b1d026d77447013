"""Stage `rl`: on-policy RL from the SFT model with exact-answer rewards (runs when rl_steps > 0)."""

from __future__ import annotations

from tt_stagekit import protocol
from tt_stagekit.contract import Artifact, StageResult
from tt_stagekit.manifest import MANIFEST

from tt_engine_foundation.runtime.config import FoundationRequest, finetune_peak_rate


def main(request: FoundationRequest) -> StageResult:
    from tt_engine_foundation.runtime.model_io import load_model_dir, save_model_dir
    from tt_engine_foundation.runtime.rl import run_rl
    from tt_engine_foundation.runtime.torchsetup import autocast_dtype, open_stage
    from tt_stagekit.promptfit import trimmed_note

    device, tok = open_stage(request)
    cfg = request.cfg
    lay = request.layout
    rows = list(request.train_rows)
    model = load_model_dir(lay.model_dir("sft"), device)

    def on_step(step: int, total: int, mean_reward: float, lr: float) -> None:
        protocol.progress(step, total, "step", {"reward": mean_reward, "lr": lr})

    protocol.log(f"RL on {len(rows)} training prompts for {cfg.rl_steps} steps")
    stats: dict = {}
    rewards = run_rl(model, tok, rows, cfg, finetune_peak_rate(cfg, model.cfg.hidden_size), device,
                     autocast_dtype(cfg, device),
                     on_step, stats)
    model_dir = save_model_dir(
        lay.model_dir("rl"), model, lay.tokenizer_json, "foundation-rl",
        {"stage": "rl", "system_message_sha256": request.system_message_sha256},
    )
    mean = sum(v for _, v in rewards) / max(1, len(rewards))
    trimmed = stats["trimmed_prompts"]
    return StageResult(
        metrics={"rl.mean_reward": mean, "rl.final_reward": rewards[-1][1] if rewards else 0.0, "rl.steps": len(rewards),
                 "rl.trimmed_prompts": trimmed},
        notes=(trimmed_note(trimmed, len(rows), "RL prompts", "foundation.sequence_length minus the answer budget",
                            stats["prompt_tokens"]),) if trimmed else (),
        series={"rl.reward": [[s, v] for s, v in rewards]},
        outputs={"model": str(model_dir)},
        artifacts=(Artifact(kind="foundation-rl", path=str(model_dir), manifest=MANIFEST),),
    )


if __name__ == "__main__":
    protocol.run_main(main, request_type=FoundationRequest)
