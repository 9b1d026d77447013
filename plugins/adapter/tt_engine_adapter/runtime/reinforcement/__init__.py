"""Reinforcement after SFT (the spec's `reinforcement` block; stage `reinforce`): the SFT adapter samples answers to
the training prompts, the spec's graders reward them, and the LoRA weights move toward the better answers. Runs
in the engine environment.

Vocabulary: *reinforcement* is the tuning (spec block, this package, `tuning.stage` "reinforce" in
tt-adapter.json), *reinforce* its stage and metric prefix (`reinforce.reward`), *GRPO* its one algorithm
(`reinforcement.algorithm`), *rollouts* the sampled answers (runtime/rollouts.py, the batched sampler). Modules:
`grpo` (GRPO's arithmetic), `prompts` (the training prompts, never a held-out one), `train` (the loop, on
runtime/loop.py's skeleton).
"""
