"""A spec as the Node CLI 0.13's `tt init` wrote it, with the user's own texts in it (tests/host/spec/test_node_specs.py,
tests/host/cli/test_node_project.py, tests/host/models/test_base_models.py)."""

from __future__ import annotations

UUID = "6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def node_init_spec(**changes) -> dict:
    """Node's `tt init` layout with the user's own texts in it."""
    spec = {"id": UUID, "name": "Sentiment", "description": "", "base_model": "org/tiny-model",
            "system_prompt": "Classify the sentiment of the review.", "guidelines": [], "constraints": [],
            "examples": [{"input": f"review {i}", "output": "positive" if i % 2 else "negative"} for i in range(6)],
            "eval_cases": []}
    spec.update(changes)
    return spec
