"""What a run's finished stages add up to: each completed stage's result taken into the tally
(tt_host.reports.ending.Tally, which the report is made from).

A stage's result.json (docs/protocol.md) gives metrics, series, notes, predictions and artifacts. The
host scores predictions against the references it kept back (labels never crossed into the engine),
keeps the general-regression answers for the gate, and registers every artifact at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from tt_host.engine import Stage, gate_side
from tt_host.models.registry import register
from tt_host.evaluation.scoring import read_predictions, score
from tt_host.reports.ending import Tally
from tt_host.runs.invoke import RunCall
from tt_host.runs.state import RunState
from tt_host.spec.general import GeneralSet
from tt_stagekit.contract import StageResult
from tt_stagekit.sides import CANDIDATE_SIDE, SFT_SIDE


def take_result(call: RunCall, state: RunState, stage: Stage, result: dict[str, Any], tally: Tally,
                general: Optional[GeneralSet]) -> None:
    """Add a completed stage's result to the tally: metrics, series, notes, scores, registered models."""
    run = call.run
    tally.completed[stage.name] = {"dir": str(run.stage_dir(stage.name)), "result": result}
    taken = StageResult.from_json(result)
    tally.metrics.update(taken.metrics)
    tally.series.update(taken.series)
    tally.notes += taken.notes
    scored: dict[str, Any] = {}
    if stage.evaluates and taken.predictions:
        predictions = read_predictions(run.stage_dir(stage.name) / taken.predictions)
        # an evaluating stage other than the baseline scores the tuned model; `sft` the model before a tuning stage
        role = gate_side(stage) or (SFT_SIDE if stage.evaluates == SFT_SIDE else CANDIDATE_SIDE)
        tally.answers[role], tally.held_out_sides[role] = predictions, stage.evaluates
        scored.update(score(predictions, call.loaded.compiled.references(), stage.evaluates, call.loaded.graders))
        scored["eval.count"] = scored[f"{stage.evaluates}.count"]
    side = gate_side(stage)
    if general is not None and side and taken.general_predictions:
        answers = read_predictions(run.stage_dir(stage.name) / taken.general_predictions)
        tally.general_answers[side] = answers
        scored.update(score(answers, general.references(), f"{side}.general"))
    if side and taken.benchmarks:
        tally.benchmark_scores[side] = taken.benchmarks
    tally.metrics.update(scored)
    if scored:
        call.observers.event(str(run.path), stage.name, {"type": "scores", "stage": stage.name, "values": scored})
    for artifact in taken.artifacts if call.loaded.register_models else ():  # a sweep's trials register none
        path = Path(artifact.path)
        path = path if path.is_absolute() else run.path / path
        tally.models.append(register(path, run_id=state.id, run_dir=run.path, spec_name=call.loaded.spec.name,
                                     engine=call.loaded.engine.name, kind=artifact.kind,
                                     spec_id=call.loaded.spec_id,
                                     system_message=call.loaded.compiled.system_message))
        call.reporter.message(f"registered model {tally.models[-1]['id']} version {tally.models[-1]['version']}",
                              "green")
