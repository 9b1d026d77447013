"""Preference tuning after SFT (the spec's `preference` block; stages `reference` and `preference`): the model
learns from pairs of a chosen and a rejected answer. Runs in the engine environment.

Vocabulary: *preference* is the tuning, `preference.loss` names its algorithm, one module each — `dpo`, `simpo`,
`kto` (TRL's formulas); `loss` picks one and adds the SFT term; `logps` scores completions (the reference stage
and the loop share it); `pairs` derives and encodes the pairs; `train` is the loop (runtime/loop.py's skeleton).
"""
