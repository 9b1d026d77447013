"""Comparing two runs on the prompts both evaluated (`tt runs compare A B`).

Aggregate metrics of two runs are only comparable on the same prompts. For each run, what it evaluated and
what it trained on is read from what its stages were sent, so a run made before splits were recorded
compares the same way: the prompts of every evaluating stage's request.json (`eval_prompts`, and
`general_prompts` for the general-regression set), the rows of every training stage's request
(`train_rows`), the predictions each evaluating stage wrote, and the references of the run's spec.json (the
examples) and general set. Prompts are matched by `tt_host.spec.split.prompt_digest` (normalized), never
by row id (ids are positions, which move when examples are added).

The result: the counts shared and not shared, each side's metrics re-scored on the shared prompts
(tt_stagekit.scoring, as the host scores a run; on the held-out prompts also with the graders of the first
run's spec.json, the one yardstick for both sides: `graders_from` names that run), and one warning per prompt one run trained on while the
other held it out (or answered it in its general set). Nothing here writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tt_host.evaluation.scoring import read_predictions, score
from tt_host.runs.store import RunDir
from tt_host.spec.split import prompt_digest
from tt_stagekit.graders import GraderError, GraderSet, from_spec

GENERAL = "general"


@dataclass
class Evaluated:
    """One side's answers of one run: prompt digest -> prediction, plus the reference of each digest."""

    predictions: dict[str, str] = field(default_factory=dict)
    references: dict[str, str] = field(default_factory=dict)


@dataclass
class RunPrompts:
    """What one run evaluated and trained on, by prompt digest."""

    held_out: dict[str, str] = field(default_factory=dict)  # digest -> prompt text
    general: dict[str, str] = field(default_factory=dict)
    trained: set[str] = field(default_factory=set)
    sides: dict[str, Evaluated] = field(default_factory=dict)  # "candidate", "baseline.general", ...


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def user_text(messages: list[dict[str, Any]]) -> str:
    """The prompt of a row as its digest is taken: its user turns, joined."""
    return "\n".join(m.get("content", "") for m in messages if isinstance(m, dict) and m.get("role") == "user")


def _sides(engine: Optional[str]) -> dict[str, str]:
    """{stage name: what it evaluates} from the installed engine (empty when it is not installed)."""
    try:
        from tt_host.plugins import load_plugins

        return {stage.name: stage.evaluates for stage in load_plugins().engine(engine).stages if stage.evaluates}
    except Exception:  # an engine no longer installed: the stages' names stand in for their sides
        return {}


def _example_references(run: Path) -> dict[str, str]:
    spec = _json(run / "spec.json")
    return {prompt_digest(str(e.get("input", ""))): str(e.get("output", ""))
            for e in spec.get("examples") or [] if isinstance(e, dict)}


def _graders(run: Path) -> Optional[GraderSet]:
    """The graders of the run's spec.json (declared or derived); None when it has no examples or they fail to load."""
    spec = _json(run / "spec.json")
    if not spec.get("examples"):
        return None
    try:
        return from_spec(spec)
    except (GraderError, ValueError, TypeError):
        return None


def _general_references(run: Path) -> dict[str, str]:
    policy = ((_json(run / "spec.json").get("evaluation") or {}).get("general_regression") or {})
    if not policy.get("dataset"):
        return {}
    from tt_host.spec.general import GeneralSetError, read_general_set

    try:
        general = read_general_set(Path(policy["dataset"]), policy.get("system_prompt"))
    except (GeneralSetError, OSError):
        return {}
    return {prompt_digest(user_text(r["messages"][:-1])): r["messages"][-1]["content"] for r in general.rows}


def run_prompts(run: Path) -> RunPrompts:
    """What `run` evaluated and trained on, from its stages' requests and predictions."""
    state = RunDir(run).load()
    evaluates = _sides(state.get("engine"))
    references, general_refs = _example_references(run), None
    out = RunPrompts()
    for stage in state.get("stages") or {}:
        request = _json(run / stage / "request.json")
        for row in request.get("train_rows") or []:
            out.trained.add(prompt_digest(user_text(row.get("messages") or [])))
        if (state["stages"][stage] or {}).get("state") != "completed":
            continue
        result = RunDir(run).read_result(stage) or {}
        side = evaluates.get(stage, stage)
        for key, prompts_key, target in (("predictions", "eval_prompts", out.held_out),
                                         ("general_predictions", "general_prompts", out.general)):
            rows = request.get(prompts_key) or []
            if not rows:
                continue
            digest_of = {row["id"]: prompt_digest(user_text(row["messages"])) for row in rows}
            target.update({digest_of[row["id"]]: user_text(row["messages"]) for row in rows})
            if not result.get(key):
                continue
            try:
                answers = read_predictions(run / stage / result[key])
            except (OSError, ValueError):
                continue
            if key == "general_predictions" and general_refs is None:
                general_refs = _general_references(run)
            refs = references if key == "predictions" else general_refs
            name = side if key == "predictions" else f"{side}.{GENERAL}"
            out.sides[name] = Evaluated({digest_of[i]: p for i, p in answers.items() if i in digest_of},
                                        {d: refs[d] for d in digest_of.values() if d in refs})
    return out


def _shared_metrics(a: RunPrompts, b: RunPrompts, shared: set[str], general: bool,
                    graders: Optional[GraderSet] = None) -> dict[str, list]:
    metrics: dict[str, list] = {}
    for name in sorted(set(a.sides) & set(b.sides)):
        if name.endswith(f".{GENERAL}") != general:
            continue
        scored = []
        for run in (a, b):
            side = run.sides[name]
            ids = sorted(d for d in shared if d in side.predictions and d in side.references)
            scored.append(score({d: side.predictions[d] for d in ids}, {d: side.references[d] for d in ids}, name,
                                None if general else graders))
        for key in sorted(set(scored[0]) | set(scored[1])):
            metrics[key] = [scored[0].get(key), scored[1].get(key)]
    return metrics


def _leaks(a: RunPrompts, b: RunPrompts, ids: tuple[str, str]) -> list[dict[str, str]]:
    """One warning per prompt one run trained on while the other evaluated it (held out or general set)."""
    out = []
    for (held, trained), (held_id, trained_id) in (((a, b), ids), ((b, a), (ids[1], ids[0]))):
        for what, prompts in (("held out", held.held_out), ("general-regression", held.general)):
            for digest in sorted(set(prompts) & trained.trained):
                out.append({"prompt": prompts[digest], "prompt_sha256": digest, "evaluated_in": held_id,
                            "as": what, "trained_in": trained_id,
                            "warning": f"run {trained_id} trained on {prompts[digest]!r}, which run {held_id} "
                                       f"{'held out' if what == 'held out' else 'answers in its general-regression set'}"
                                       "; their scores on it are not comparable"})
    return out


def compare_prompts(first: Path, second: Path, ids: tuple[str, str]) -> dict[str, Any]:
    """{"held_out": {...}, "general": {...}, "warnings": [...]} for two runs (see the module docstring)."""
    a, b = run_prompts(first), run_prompts(second)
    graders = _graders(first)
    out: dict[str, Any] = {}
    for key, general in (("held_out", False), (GENERAL, True)):
        left, right = (a.general, b.general) if general else (a.held_out, b.held_out)
        if not left and not right:
            continue
        shared = set(left) & set(right)
        out[key] = {"shared": len(shared), "only_first": len(set(left) - shared), "only_second": len(set(right) - shared),
                    "metrics": _shared_metrics(a, b, shared, general, graders)}
        if not general and graders is not None:
            out[key]["graders_from"] = ids[0]
    out["warnings"] = _leaks(a, b, ids)
    return out
