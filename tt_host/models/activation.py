"""Model activation: which registered model is live, an append-only history, rollback.

The history is `$TT_HOME/activations.jsonl`, beside the registry folder
(`$TT_HOME/models`). Each line is one record, appended whole under an
exclusive lock (`activations.lock`) with one write and an fsync, so readers
never see half a record; a torn last line (power loss, a kill mid-append) is
ignored by readers and repaired by the next append (tt_host.fsutil.append_line),
so the record appended next is never lost in it. A line that is not a record
is named (file:line) by every command that reads the history. Nothing else is
ever rewritten or removed.

Records:

    {"at", "action": "activate", "model": ID, "previous": ID|null, "gate": "passed"|"failed"|"not run",
     "forced": bool, "overrode": why --force was needed | null}
    {"at", "action": "rollback", "model": ID|null (null: the base model), "previous": ID, "base_of": ID|null}

Replaying the history gives a stack: activate pushes, rollback pops. The
active model is the top; rolling back the last one leaves the base model of
the model rolled back from active (`base_of`).

Activation refuses (exit 1) a model that fails verification (never
overridable: a changed model is not the one that was evaluated), and a model
whose run's general-regression gate failed or was not run, unless `force`.
"""

from __future__ import annotations

import getpass
import json
import os
import time
from pathlib import Path
from typing import Any, Optional

from tt_host.errors import CorruptRecord, TTError
from tt_host.models import registry
from tt_host.fsutil import FileLock, append_line, make_private_dir

HISTORY = "activations.jsonl"


class ActivationError(TTError):
    """The model cannot be activated or rolled back (exit 1; 2 for an unknown id)."""


def history_path() -> Path:
    return registry.tt_home() / HISTORY


def read_history() -> list[dict[str, Any]]:
    """The history's records, oldest first. A torn last line (no newline: a writer killed mid-append, never a
    committed record) is left out, and the next append repairs it; any other line that is not a record raises
    CorruptRecord naming the file and line (the active model cannot be known past it)."""
    try:
        data = history_path().read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: b"" or a torn last line
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict) or record.get("action") not in ("activate", "rollback") or (
                record["action"] == "activate" and not isinstance(record.get("model"), str)):
            raise CorruptRecord(f"{history_path()}:{number}", "not an activation record",
                                "restore the file from a backup, or remove that line (the active model is then "
                                "worked out without it) and check `tt models history`")
        records.append(record)
    return records


def _stack(records: list[dict[str, Any]]) -> tuple[list[str], Optional[dict[str, Any]]]:
    stack: list[str] = []
    for record in records:
        if record.get("action") == "activate":
            stack.append(record["model"])
        elif record.get("action") == "rollback" and stack:
            stack.pop()
    return stack, (records[-1] if records else None)


def current() -> dict[str, Any]:
    """{"model": ID|None, "base_of": ID|None, "since": time|None, "record": last record|None}."""
    stack, last = _stack(read_history())
    if stack:
        return {"model": stack[-1], "base_of": None, "since": last["at"], "record": last}
    if last is None:
        return {"model": None, "base_of": None, "since": None, "record": None}
    return {"model": None, "base_of": last.get("base_of"), "since": last["at"], "record": last}


def _append(record: dict[str, Any]) -> dict[str, Any]:
    record = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **record, "user": _user()}
    line = (json.dumps(record, ensure_ascii=False, sort_keys=False) + "\n").encode("utf-8")
    append_line(history_path(), line)  # a regular file only; a torn last line repaired first
    return record


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return ""


def _lock() -> FileLock:
    make_private_dir(registry.tt_home())
    return FileLock(registry.tt_home() / "activations.lock", holder=f"pid {os.getpid()}")


def gate_of(entry: dict[str, Any]) -> dict[str, Any]:
    """The general-regression gate recorded in the model's run report: {"status": passed|failed|not run, ...}."""
    report_path = Path(entry.get("run_dir", "")) / "report.json"
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        report = {}
    gate = report.get("general_regression") if isinstance(report, dict) else None
    if not isinstance(gate, dict) or gate.get("status") not in ("passed", "failed"):
        return {"status": "not run", "failures": []}
    return gate


def activate(model_id: str, force: bool = False) -> dict[str, Any]:
    """Make MODEL the active one; returns the record appended (or the current state when already active)."""
    try:
        entry, problems = registry.verify_model(model_id)
    except LookupError as exc:
        raise ActivationError(str(exc), exit_code=2) from None
    if problems:
        raise ActivationError(f"model {model_id} fails verification and is never activated: "
                              + "; ".join(map(str, problems)) + f" (see `tt models verify {model_id}`)")
    gate = gate_of(entry)
    overrode = None
    if gate["status"] != "passed":
        if gate["status"] == "failed":
            why = "general-regression gate failed: " + "; ".join(gate.get("failures") or ["see the run report"])
        else:
            why = ("general-regression gate was not run (add evaluation.general_regression to the spec and "
                   "run again)")
        if not force:
            raise ActivationError(f"refusing to activate {model_id}: {why}; `tt models activate {model_id} --force` "
                                  "activates it anyway (recorded in the history)")
        overrode = why
    with _lock():
        state = current()
        if state["model"] == model_id:
            return {"action": "none", "model": model_id, "already_active": True}
        return _append({"action": "activate", "model": model_id, "previous": state["model"],
                        "gate": gate["status"], "forced": overrode is not None, "overrode": overrode})


def rollback() -> dict[str, Any]:
    """Back to the previously active model, or to the base model when there is none."""
    with _lock():
        stack, _ = _stack(read_history())
        if not stack:
            raise ActivationError("no model is active; nothing to roll back (`tt models activate ID`)")
        leaving = stack.pop()
        return _append({"action": "rollback", "model": stack[-1] if stack else None, "previous": leaving,
                        "base_of": None if stack else leaving})
