"""The validate check of a spec's graders: every grader must pass every example's own output.

`check(spec)` builds the spec's graders (tt_stagekit.graders.from_spec: declared in `evaluation.graders` or
derived from the outputs) and scores each example's output against itself. A grader that fails one is a
SpecError at the grader's entry (`evaluation.graders.1`), naming it and the examples (`examples.3`, its
input's start): a grader that contradicts the spec would train and measure the wrong thing. A spec with a
`regex` grader is checked in a child process (`python -P`: nothing from the current folder importable) under a
time limit (CHECK_SECONDS), so a pattern that is slow without being refused by the nesting rule cannot hang
`tt validate` on a hostile spec's outputs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

from tt_host.spec.errors import SpecError
from tt_host.spec.schema import BehaviorSpec
from tt_stagekit.graders import GraderSet, ReferenceCheck, from_spec

CHECK_SECONDS = 10.0
SHOWN = 5  # examples named per failing grader
_CHILD = ("import json, sys\n"
          "from tt_stagekit.graders import from_spec\n"
          "spec = json.load(sys.stdin)\n"
          "checks = from_spec(spec).check_references([e['output'] for e in spec['examples']])\n"
          "json.dump([[c.name, c.passed, c.total, list(c.failed)] for c in checks], sys.stdout)\n")


@dataclass
class GraderCheck:
    """The spec's graders and how each did on the reference outputs; `errors` when one failed."""

    graders: Optional[GraderSet] = None
    references: list[ReferenceCheck] = field(default_factory=list)
    errors: list[SpecError] = field(default_factory=list)

    def described(self) -> list[dict[str, Any]]:
        """Each grader's describe() with its pass rate on the reference outputs (`tt validate --json`)."""
        if self.graders is None:
            return []
        rates = {check.name: check for check in self.references}
        return [{**grader.describe(), "reference_passed": rates[grader.name].passed,
                 "reference_count": rates[grader.name].total, "reference_pass_rate": rates[grader.name].pass_rate}
                for grader in self.graders.graders]


def grader_spec(spec: BehaviorSpec) -> dict[str, Any]:
    """What from_spec reads of a validated spec: its examples and `evaluation.graders`."""
    graders = spec.evaluation.graders if spec.evaluation else None
    return {"examples": [{"input": e.input, "output": e.output} for e in spec.examples],
            "evaluation": {"graders": graders}}


def check(spec: BehaviorSpec) -> GraderCheck:
    data = grader_spec(spec)
    graders = from_spec(data)
    outputs = [e.output for e in spec.examples]
    if any(grader.kind == "regex" for grader in graders.graders):
        references, problem = _in_child(data)
        if problem:
            return GraderCheck(graders, [], [SpecError("evaluation.graders", problem)])
    else:
        references = graders.check_references(outputs)
    result = GraderCheck(graders, references)
    declared = spec.evaluation is not None and spec.evaluation.graders is not None
    for index, (grader, done) in enumerate(zip(graders.graders, references)):
        if not done.failed:
            continue
        named = ", ".join(f"examples.{i} ({_start(spec.examples[i].input)})" for i in done.failed[:SHOWN])
        more = f" and {len(done.failed) - SHOWN} more" if len(done.failed) > SHOWN else ""
        loc = f"evaluation.graders.{index}" if declared else f"examples.{done.failed[0]}.output"
        result.errors.append(SpecError(loc, (
            f"grader {grader.name!r} ({grader.kind}) fails the spec's own reference output of {named}{more} "
            f"({done.passed}/{done.total} pass): it contradicts the examples, so it would train and measure the "
            f"wrong thing; fix the grader's settings or those examples' outputs")))
    return result


def _in_child(data: dict[str, Any]) -> tuple[list[ReferenceCheck], Optional[str]]:
    try:
        done = subprocess.run([sys.executable, "-P", "-c", _CHILD], input=json.dumps(data), capture_output=True,
                              text=True, timeout=CHECK_SECONDS, start_new_session=True)
    except subprocess.TimeoutExpired:
        return [], (f"the graders took over {CHECK_SECONDS:.0f} s to score the examples' outputs (a `regex` grader "
                    "whose pattern backtracks on them); simplify the pattern")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return [], f"the graders could not score the examples' outputs: {last}"
    return [ReferenceCheck(name, passed, total, tuple(failed)) for name, passed, total, failed
            in json.loads(done.stdout)], None


def _start(text: str, limit: int = 40) -> str:
    first = " ".join(text.split())
    return repr(first if len(first) <= limit else first[: limit - 1] + "…")
