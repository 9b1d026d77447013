"""Graders: score an answer against a prompt's reference, compiled from the spec (docs/evaluation.md, Graders).

One definition for the host (the validate check, held-out scoring) and every engine (rewards, preference
pairs). Stdlib only.

- `from_spec(spec) -> GraderSet`: `evaluation.graders` when the spec declares them, else derived from the
  examples' outputs (derive: label, number, JSON shape, exact + token F1);
- `GraderSet.graders`, `.reward(answer, reference)` (mean score, in [0, 1]), `.passes(answer, reference)`
  (every grader passes), `.check_references(outputs)` (the validate check);
- `Grader.name`, `.kind`, `.score(answer, reference)` in [0, 1], `.passes(answer, reference)`, `.describe()`;
- `GraderError`: a bad `evaluation.graders` entry, naming its field.

Modules: base (the contract, JSON parsing), kinds (text kinds), jsonkinds and jsonschema (JSON kinds),
regexsafe (the catastrophic-backtracking rule), derive (the derivation rules), graderset (the set).
"""

from tt_stagekit.graders.base import Grader, GraderError
from tt_stagekit.graders.graderset import KINDS, GraderSet, ReferenceCheck, build_entries, from_spec

__all__ = ["Grader", "GraderError", "GraderSet", "KINDS", "ReferenceCheck", "build_entries", "from_spec"]
