"""`SpecError`: one problem found in a spec, at its dotted path (`examples.3.input`, `(file)`, `(spec)`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SpecError:
    loc: str
    msg: str

    def as_dict(self) -> dict[str, str]:
        return {"loc": self.loc, "msg": self.msg}
