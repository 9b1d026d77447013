"""The `--json` contract's shared parts: the one failure envelope, and the Node CLI 0.13's keys beside tt's.

Every failure under `--json` is `{ok: false, error: {code, message, exit_code}, ...}` (Node's envelope was
`{error: {code, message, exit_code}}`); `code` says which kind of failure by its exit code (`ERROR_CODES`).
A command's success keeps tt's keys and adds Node's where Node had them (docs/json.md has the table).
Stdlib only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

ERROR_CODES = {1: "failed", 2: "invalid_input", 130: "interrupted"}
USAGE = "usage"  # a command line click could not parse (exit 2)


def envelope(message: str, exit_code: int, code: Optional[str] = None) -> dict[str, Any]:
    """The `error` object of a failure."""
    return {"code": code or ERROR_CODES.get(exit_code, "failed"), "message": message, "exit_code": exit_code}


def failure(message: str, exit_code: int, code: Optional[str] = None, **extra: Any) -> dict[str, Any]:
    """A whole failure answer: `{ok: false, error: {...}}` and the command's own keys."""
    return {"ok": False, "error": envelope(message, exit_code, code), **extra}


def run_keys(run_dir: Path, report: Optional[dict[str, Any]], spec_id: Optional[str]) -> dict[str, Any]:
    """Node's `tt run --json` keys for a tt run: its id, the (first) model it registered, where its report and
    artifacts are, and the spec's Node id."""
    models = (report or {}).get("models") or []
    run_id = (report or {}).get("run_id")
    if run_id is None:
        try:
            run_id = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("id")
        except (OSError, ValueError, AttributeError):
            run_id = None
    report_path = run_dir / "report.json"
    return {"run_id": run_id, "model_id": models[0]["id"] if models else None,
            "model_ids": [m["id"] for m in models], "report_path": str(report_path) if report else None,
            "artifact_dir": str(run_dir), "behavior_spec_id": spec_id}


def verdict(problems: list[Any], exit_code: int = 1) -> dict[str, Any]:
    """`ok`, and `error` (the envelope naming the problems; null when none) for a command that checks things."""
    if not problems:
        return {"ok": True, "error": None}
    return {"ok": False, "error": envelope("; ".join(str(p) for p in problems), exit_code)}


def spec_path_given(argument: Optional[str]) -> bool:
    """Whether a `models prefetch|verify-base` argument is a spec file (Node's form) rather than a hub id."""
    return argument is not None and (argument.endswith(".json") or Path(argument).is_file())
