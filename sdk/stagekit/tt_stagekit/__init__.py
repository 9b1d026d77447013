"""Runtime helpers shared by tt engines.

Engine runtime code never imports `tt_host`; what several engines need at
runtime lives here instead, in a stdlib-only distribution that each engine
lists as a dependency (so it is in the host environment for the plugin module
and in each engine environment for its stages). The host depends on it for
`scoring`, `chatrows` and `signals`.

- `protocol`: the stage side of the stage protocol (docs/protocol.md).
- `signals`: copies of one stop request count once; a stage stops when its host dies (docs/operations.md).
- `distributed`: the torchrun process group, collectives, DDP (torch imported lazily).
- `devices`: which device a stage computes on.
- `launcher`: starting a stage under torchrun.
- `scoring`: the answer metrics (the host scores with them too).
- `sides`: the evaluating sides (`baseline`, `sft`, `candidate`) a held-out evaluation answers for.
- `graders`: the spec's graders (derived or `evaluation.graders`): rewards and held-out grader scores.
- `regexlimit`: the one time limit every user regular expression runs under (a child process per pattern).
- `benchmarks`: lm-evaluation-harness on a stage's transformers model, for the gate (lm-eval imported lazily).
"""
