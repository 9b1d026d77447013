"""Judging answers, engine-neutral: scoring predictions against references (`scoring`), the general-regression
gate (`general_gate`), the benchmark gate (`benchmark_gate`) and the tuning gate (`tuning_gate`: the final model
against SFT) a promotion must pass, and the cross-run baseline cache (`baseline_cache`). The graders derived from
a spec belong here too."""
