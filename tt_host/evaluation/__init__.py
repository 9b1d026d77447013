"""Judging answers, engine-neutral: scoring predictions against references (`scoring`), the general-regression
gate (`general_gate`) and the benchmark gate (`benchmark_gate`) a promotion must pass, and the cross-run
baseline cache (`baseline_cache`). The graders derived from a spec belong here too."""
