"""Stage `prepare`: check the compiled training rows and the prebuilt datasets, write them as JSONL.

Outputs (`prepare/`): `train.jsonl` (the host's training rows followed by the
prebuilt `train` rows, each with the compiled system message),
`validation.jsonl` and `test.jsonl` when those prebuilt sets are given
(these keep their answers: they are the user's own labelled files, scored by
the engine, see docs/adapter.md).
"""

from __future__ import annotations

from typing import Any

from tt_engine_adapter.runtime.config import AdapterRequest
from tt_engine_adapter.runtime.data import load_prebuilt, with_system
from tt_stagekit.contract import StageResult
from tt_stagekit.files import atomic_write_jsonl
from tt_stagekit.protocol import InvalidInput, log, run_main


def _check_host_row(row: Any, index: int) -> None:
    roles = [m.get("role") for m in row.get("messages", [])] if isinstance(row, dict) else None
    if roles is None or roles[-2:] != ["user", "assistant"] or not row.get("id"):
        raise InvalidInput(f"train_rows[{index}]: expected {{id, messages: [system?, user, assistant]}}")


def main(request: AdapterRequest) -> StageResult:
    system = request.system_message
    stage_dir = request.stage_dir
    train = []
    for index, row in enumerate(request.train_rows):
        _check_host_row(row, index)
        train.append({"id": row["id"], "messages": with_system(system, row["messages"])})
    prebuilt = load_prebuilt(request.spec, system)
    for row in prebuilt.get("train", []):
        train.append({"id": row["id"], "messages": with_system(system, row["messages"])})
    if not train:
        raise InvalidInput("no training rows: add examples or a prebuilt datasets.train")
    outputs: dict[str, Any] = {"train": str(stage_dir / "train.jsonl"), "train_count": len(train)}
    atomic_write_jsonl(stage_dir / "train.jsonl", train)
    for split in ("validation", "test"):
        if split in prebuilt:
            rows = [{"id": r["id"], "messages": with_system(system, r["messages"])} for r in prebuilt[split]]
            atomic_write_jsonl(stage_dir / f"{split}.jsonl", rows)
            outputs[split] = str(stage_dir / f"{split}.jsonl")
            outputs[f"{split}_count"] = len(rows)
    log(f"{len(train)} training rows" + "".join(
        f", {outputs[f'{s}_count']} {s} rows" for s in ("validation", "test") if s in outputs))
    return StageResult(metrics={"data.train_rows": len(train)}, outputs=outputs)


if __name__ == "__main__":
    run_main(main, request_type=AdapterRequest)
