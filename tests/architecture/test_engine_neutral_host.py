"""The host knows no engine by name: tt_host's source names no shipped engine (export, serving and model lookup
come from the Engine record; that they work from the record alone: tests/host/models/test_export_serve_from_record.py).
"""

from __future__ import annotations

import re
from pathlib import Path

HOST = Path(__file__).resolve().parents[2] / "tt_host"
SHIPPED = re.compile(r"\b(foundation|adapter)s?\b|tt_engine_(foundation|adapter)|tt-engine-(foundation|adapter)", re.I)
# The one place tt_host may name a shipped engine: the engine a spec without `engine` is for. (A pipeline document's
# runtime keyword is the one an engine declares in its record, `PipelineVocabulary.runtime`.)
ALLOWED = {("spec/schema.py", 'DEFAULT_ENGINE = "adapter"'),
           # the option's name is the one vLLM users know (`--max-loras`) in tt's words (issue 43); its meaning
           # is engine-neutral: models resident at once on one base (ServeRequest.max_resident)
           ("cli/serve.py", 'max_resident: Optional[int] = typer.Option(None, "--max-adapters", help="Models kept '
                            'loaded at once (least "')}


def test_tt_host_source_names_no_shipped_engine():
    found = []
    for path in sorted(HOST.rglob("*")):
        if not path.is_file() or path.suffix == ".pyc":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SHIPPED.search(line) and (path.relative_to(HOST).as_posix(), line.strip()) not in ALLOWED:
                found.append(f"tt_host/{path.relative_to(HOST).as_posix()}:{number}: {line.strip()}")
    assert not found, "tt_host names a shipped engine (declare it in the Engine record instead):\n" + "\n".join(found)
