"""A spec's `sweep` block (or a `--sweep FILE`): what `tt sweep` searches, checked before anything is created.

Runs in the host's interpreter. The block:

    "sweep": {"trials": 8, "seed": 0, "selection_fraction": 0.2, "objective": "grader_score",
              "sampler": "tpe", "parameters": {"hyperparameters.learning_rate": {"log_uniform": [1e-4, 1e-2]},
                                               "hyperparameters.lora_rank": {"choice": [4, 8, 16]},
                                               "hyperparameters.n_epochs": {"int": [1, 4]}}}

Each parameter is a `--set`-style key of the spec (tt_host.spec.overrides) with exactly one of `uniform`,
`log_uniform` (two numbers, low < high; log: low > 0), `int` (two integers, low <= high) or `choice` (a list of
one to 100 JSON scalars). `check` returns the block or errors naming the field (`sweep.parameters.KEY.int`);
a key is also tried on the spec itself with each bound or choice (`SpecError` at `sweep.parameters.KEY` when the
engine refuses the value), so a bad block exits 2 before a study or a run exists. Keys that would change the
examples, their split or the engine (`examples`, `evaluation`, `name`, `engine`) are refused: every trial must
be scored on the same selection rows. Nothing here writes to disk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from pydantic import Field, ValidationError

from tt_host.spec.errors import SpecError
from tt_host.spec.overrides import SEGMENT
from tt_host.spec.strict import StrictModel

OBJECTIVES = ("grader_score", "exact_match", "token_f1")
SAMPLERS = ("tpe", "grid", "random")
FIXED_FIELDS = ("examples", "evaluation", "name", "engine", "sweep", "system_prompt", "guidelines", "constraints")
Scalar = Union[bool, int, float, str]


class Parameter(StrictModel):
    """One searched setting: exactly one of the four forms."""

    uniform: Optional[list[float]] = Field(None, min_length=2, max_length=2)
    log_uniform: Optional[list[float]] = Field(None, min_length=2, max_length=2)
    int_: Optional[list[int]] = Field(None, alias="int", min_length=2, max_length=2)
    choice: Optional[list[Scalar]] = Field(None, min_length=1, max_length=100)

    def form(self) -> tuple[str, Any]:
        given = [(name, value) for name, value in (("uniform", self.uniform), ("log_uniform", self.log_uniform),
                                                   ("int", self.int_), ("choice", self.choice)) if value is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of uniform, log_uniform, int or choice")
        return given[0]

    def problem(self) -> Optional[tuple[str, str]]:
        """(the form's name, what is wrong) or None."""
        name, value = self.form()
        if name == "choice":
            return (name, "the choices repeat a value") if len({json.dumps(v) for v in value}) != len(value) else None
        low, high = value
        if name == "int" and low > high:
            return name, f"low {low} is above high {high}"
        if name != "int" and not low < high:
            return name, f"low {low} must be below high {high}"
        if name == "log_uniform" and low <= 0:
            return name, f"a log scale needs low > 0, not {low}"
        return None

    def probes(self) -> list[Any]:
        """The values tried on the spec before the sweep starts: the bounds, or every choice."""
        name, value = self.form()
        return list(value) if name == "choice" else [value[0], value[1]]


class SweepBlock(StrictModel):
    trials: int = Field(8, ge=1, le=1000)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    selection_fraction: float = Field(0.2, gt=0.0, le=0.5)
    objective: Literal["grader_score", "exact_match", "token_f1"] = "grader_score"
    sampler: Literal["tpe", "grid", "random"] = "tpe"
    parameters: dict[str, Parameter] = Field(min_length=1, max_length=20)

    def grid(self) -> Optional[dict[str, list[Any]]]:
        """The grid sampler's search space (every parameter a `choice`), else None."""
        return {key: list(p.choice or []) for key, p in self.parameters.items()}

    def digest_json(self) -> dict[str, Any]:
        """What names the study: the block without `trials` (more trials continue the same study)."""
        return self.model_dump(mode="json", by_alias=True, exclude={"trials"}, exclude_none=True)


@dataclass
class Checked:
    block: Optional[SweepBlock]
    errors: list[SpecError]


def check(raw: Any, where: str = "sweep") -> Checked:
    """The block validated on its own (not yet against the spec): errors at `where.FIELD`."""
    if not isinstance(raw, dict):
        return Checked(None, [SpecError(where, "must be an object: {\"trials\": 8, \"parameters\": {...}}")])
    try:
        block = SweepBlock.model_validate(raw)
    except ValidationError as exc:
        return Checked(None, [SpecError(f"{where}." + ".".join(str(p) for p in e["loc"]) if e["loc"] else where,
                                        "unknown field (misspelled?); remove it or check the spelling"
                                        if e["type"] == "extra_forbidden" else e["msg"]) for e in exc.errors()])
    errors = []
    for key, parameter in block.parameters.items():
        loc = f"{where}.parameters.{key}"
        parts = key.split(".")
        if not all(SEGMENT.fullmatch(part) for part in parts):
            errors.append(SpecError(loc, "not a dotted spec field (hyperparameters.learning_rate)"))
            continue
        if parts[0] in FIXED_FIELDS:
            errors.append(SpecError(loc, f"`{parts[0]}` cannot be searched: every trial is scored on the same "
                                         "examples and split; search a setting of the engine's block "
                                         "(hyperparameters.learning_rate)"))
            continue
        try:
            if problem := parameter.problem():
                errors.append(SpecError(f"{loc}.{problem[0]}", problem[1]))
        except ValueError as exc:
            errors.append(SpecError(loc, str(exc)))
        if block.sampler == "grid" and parameter.choice is None:
            errors.append(SpecError(loc, "the grid sampler searches `choice` lists only; give the values to try"))
    return Checked(None if errors else block, errors)


def probe_overrides(block: SweepBlock) -> list[tuple[str, str]]:
    """(parameter key, `--set` argument) for every value `check_on_spec` tries."""
    return [(key, f"{key}={json.dumps(value)}") for key, parameter in block.parameters.items()
            for value in parameter.probes()]
