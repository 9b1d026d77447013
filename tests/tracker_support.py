"""Reading back what the shipped tracker observers wrote, with each tracker's own reader.

- TensorBoard: `EventAccumulator`, tensorboard's own event-file reader;
- MLflow: `MlflowClient` on the tracking URI;
- W&B: an offline run's `run-*.wandb` transaction log. wandb 0.31 ships no Python
  reader for it (its Go core reads it on `wandb sync`), so `wandb_records` walks
  the log's documented framing (a 7-byte `:W&B` header, then 32 KiB blocks of
  chunks: crc32 4 bytes, length 2, type 1: full/first/middle/last) and parses
  each record with wandb's own protobuf `Record`; `wandb sync --dry-run`
  confirms wandb recognises the folder as a run to sync.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7


def tensorboard_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def mlflow_run(tracking_uri: str, experiment: str):
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment!r} at {tracking_uri}"
    runs = client.search_runs([found.experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return client, runs[0]


def wandb_records(path: Path) -> list[Any]:
    from wandb.proto.wandb_internal_pb2 import Record

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    position, pending, records = HEADER, b"", []
    while position + HEADER <= len(data):
        left = BLOCK - position % BLOCK
        length, kind = int.from_bytes(data[position + 4:position + 6], "little"), data[position + 6]
        if left < HEADER or kind == 0:  # a block's zero padding
            position += left
            continue
        pending += data[position + HEADER:position + HEADER + length]
        position += HEADER + length
        if kind in (1, 4):  # full, or the last chunk of a record
            record = Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_offline_run(folder: Path) -> dict[str, Any]:
    """The one offline run under `<folder>/wandb`: its config, history rows, final summary and exit code."""
    [log] = sorted((folder / "wandb").glob("offline-run-*/run-*.wandb"))
    dry = subprocess.run([str(Path(sys.executable).parent / "wandb"), "sync", "--dry-run", str(log.parent)],
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0 and "Would sync 1 run" in dry.stdout + dry.stderr, dry.stdout + dry.stderr
    out: dict[str, Any] = {"config": {}, "history": [], "summary": {}, "exit_code": None}
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "history":
            out["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                   for i in record.history.item})
        elif kind == "summary":
            out["summary"].update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                   for i in record.summary.update})
        elif kind == "exit":
            out["exit_code"] = record.exit.exit_code
    return out
