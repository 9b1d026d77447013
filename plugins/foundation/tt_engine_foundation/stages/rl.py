"""Stage `rl`: on-policy RL from the SFT model with exact-answer rewards (runs when rl_steps > 0)."""

from __future__ import annotations

from typing import Any, Mapping

from tt_stagekit import protocol as P


def main(request: Mapping[str, Any]) -> dict[str, Any]:
    from tt_engine_foundation.runtime.common import (
        autocast_dtype, fconfig, layout, learning_rate, load_tokenizer, request_device, setup_threads,
    )
    from tt_engine_foundation.runtime.model_io import load_model_dir, save_model_dir
    from tt_engine_foundation.runtime.rl import run_rl
    from tt_stagekit.promptfit import trimmed_note

    setup_threads()
    cfg = fconfig(request)
    lay = layout(request)
    device = request_device(request)
    tok = load_tokenizer(request)
    rows = request.get("train_rows") or []
    model = load_model_dir(lay.model_dir("sft"), device)

    def on_step(step: int, total: int, mean_reward: float, lr: float) -> None:
        P.progress(step, total, "step", {"reward": mean_reward, "lr": lr})

    P.log(f"RL on {len(rows)} training prompts for {cfg['rl_steps']} steps")
    stats: dict = {}
    rewards = run_rl(model, tok, rows, cfg, learning_rate(cfg, model), device, autocast_dtype(request, device),
                     on_step, stats)
    model_dir = save_model_dir(
        lay.model_dir("rl"), model, lay.tokenizer_json, "foundation-rl",
        {"stage": "rl", "system_message_sha256": request.get("system_message_sha256", "")},
    )
    mean = sum(v for _, v in rewards) / max(1, len(rewards))
    trimmed = stats["trimmed_prompts"]
    return {
        "metrics": {"rl.mean_reward": mean, "rl.final_reward": rewards[-1][1] if rewards else 0.0, "rl.steps": len(rewards),
                    "rl.trimmed_prompts": trimmed},
        "notes": [trimmed_note(trimmed, len(rows), "RL prompts", "foundation.sequence_length minus the answer budget",
                               stats["prompt_tokens"])] if trimmed else [],
        "series": {"rl.reward": [[s, v] for s, v in rewards]},
        "outputs": {"model": str(model_dir)},
        "artifacts": [{"kind": "foundation-rl", "path": str(model_dir), "manifest": "artifact-manifest.json"}],
    }


if __name__ == "__main__":
    P.run_main(main)
