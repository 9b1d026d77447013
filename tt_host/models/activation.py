"""Model activation: which registered model is live, an append-only history, rollback.

The history is `$TT_HOME/activations.jsonl`, beside the registry folder
(`$TT_HOME/models`). Each line is one record, appended whole under an
exclusive lock (the registry's one lock, `models/.registry.lock`, which
registration and `tt models gc` hold too) with one write and an fsync, so readers
never see half a record; a torn last line (power loss, a kill mid-append) is
ignored by readers and repaired by the next append (tt_host.fsutil.append_line),
so the record appended next is never lost in it. A line that is not a record
is named (file:line) by every command that reads the history. Nothing else is
ever rewritten or removed.

Records:

    {"at", "action": "activate", "model": ID, "version": n, "manifest_sha256": the version's,
     "previous": ID|null, "previous_version": n|null, "gate": "passed"|"failed"|"not run",
     "forced": bool, "overrode": why --force was needed | null}
    {"at", "action": "rollback", "model": ID|null (null: the base model), "version": n|null, "previous": ID,
     "base_of": ID|null}

A model is activated as one version (tt_host.models.versions), with its manifest's sha256: `check_active`
refuses to hand out an active model whose manifest is no longer the one activated (records older than
versions have neither, and mean the model's latest version).

Replaying the history gives a stack: activate pushes, rollback pops. The
active model is the top; rolling back the last one leaves the base model of
the model rolled back from active (`base_of`).

Activation refuses (exit 1) a model that fails verification (never
overridable: a changed model is not the one that was evaluated), and a model
whose run's general-regression gate failed or was not run, unless `force`; the run's lm-eval benchmarks
(report.json `benchmarks`, when the spec has them) are part of that gate, and so is a tuning stage that made
the held-out score worse than SFT (report.json `tuning`, tt_host.evaluation.tuning_gate).
"""

from __future__ import annotations

import getpass
import json
import time
from pathlib import Path
from typing import Any

from tt_host.errors import CorruptRecord, TTError
from tt_host.models import registry
from tt_host.fsutil import FileLock, append_line, sha256_file
from tt_stagekit import activations

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
    records, bad = activations.parse(data)
    if bad is not None:
        raise CorruptRecord(f"{history_path()}:{bad}", "not an activation record",
                            "restore the file from a backup, or remove that line (the active model is then "
                            "worked out without it) and check `tt models history`")
    return records


_stack = activations.replay  # the one replay, shared with the server that answers `model: "active"`


def current() -> dict[str, Any]:
    """{"model": ID|None, "version": n|None, "manifest_sha256": what was activated|None, "base_of": ID|None,
    "since": time|None, "record": last record|None}. `version` is None for a record older than versions."""
    stack, last = _stack(read_history())
    if stack:
        top = stack[-1]
        return {"model": top["model"], "version": top.get("version"), "manifest_sha256": top.get("manifest_sha256"),
                "base_of": None, "since": last["at"], "record": last}
    if last is None:
        return {"model": None, "version": None, "manifest_sha256": None, "base_of": None, "since": None,
                "record": None}
    return {"model": None, "version": None, "manifest_sha256": None, "base_of": last.get("base_of"),
            "since": last["at"], "record": last}


def active_reference(state: dict[str, Any]) -> str:
    """`id@n` of the active version (the bare id for an activation recorded before versions)."""
    return state["model"] if state.get("version") is None else f"{state['model']}@{state['version']}"


def check_active(state: dict[str, Any]) -> dict[str, Any]:
    """The active version's entry, once its manifest is proven to be the one activated; ActivationError (exit 1)
    naming both digests otherwise. Its files are checked against that manifest by whoever serves it."""
    reference = active_reference(state)
    try:
        entry = registry.get_version(reference)
    except LookupError as exc:
        raise ActivationError(f"the active model {reference} is gone: {exc}; activate another (`tt models "
                              "activate ID`) or roll back (`tt models rollback`)") from None
    if entry is None:
        raise ActivationError(f"the active model {reference} is no longer registered; activate another "
                              "(`tt models activate ID`) or roll back (`tt models rollback`)")
    activated = state.get("manifest_sha256")
    try:
        now = sha256_file(Path(entry["path"]) / registry.MANIFEST)
    except OSError:
        now = "missing"
    advice = (f"it is not served. Restore its files, or activate a verified version (`tt models history "
              f"{state['model']}`)")
    if activated is not None and now != activated:
        raise ActivationError(f"the active model {reference} no longer matches what was activated: its "
                              f"{registry.MANIFEST} sha256 is {now}, activated {activated}; {advice}")
    _, problems = registry.verify_model(reference)
    if problems:
        raise ActivationError(f"the active model {reference} no longer matches what was activated: "
                              + "; ".join(map(str, problems)) + f"; {advice}")
    return entry


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
    """The registry's one lock (tt_host.models.registry.registry_lock): every change of the history holds it,
    as registration and `tt models gc` do."""
    return registry.registry_lock("changing the activation history")


GATE_NAMES = {"general_regression": "general-regression", "benchmarks": "benchmark"}  # report.json key -> gate


def gate_of(entry: dict[str, Any]) -> dict[str, Any]:
    """The gate recorded in the model's run report: {"status": passed|failed|not run, ...}.

    The gate is the general-regression set and the lm-eval benchmarks, each when the spec configures it
    (report.json `general_regression`, `benchmarks`). A gate that is not run carries a `reason` naming what
    was configured and what did not run. A model whose tuning stage made the held-out score worse than SFT
    (report.json `tuning.worse_than_sft`, tt_host.evaluation.tuning_gate) fails the gate whatever the rest says.
    """
    gate = _configured_gates(entry)
    tuning = gate.pop("_tuning", None)
    if isinstance(tuning, dict) and tuning.get("worse_than_sft") is True:
        why = str(tuning.get("message") or "the final model is worse than SFT on the held-out set")
        reason = why if gate["status"] != "failed" else f"{gate['reason']}; {why}"
        return {**gate, "status": "failed", "failures": list(gate.get("failures") or []) + [why], "reason": reason}
    return gate


def _configured_gates(entry: dict[str, Any]) -> dict[str, Any]:
    """gate_of without the tuning check; `_tuning` carries report.json's `tuning` section for it."""
    report_path = Path(entry.get("run_dir", "")) / "report.json"
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        report = None
    if not isinstance(report, dict):
        return {"status": "not run", "failures": [], "reason": f"the model's run has no readable report ({report_path})"}
    return {**_gates(report), "_tuning": report.get("tuning")}


def _gates(report: dict[str, Any]) -> dict[str, Any]:
    parts = {key: report.get(key) for key in ("general_regression", "benchmarks") if isinstance(report.get(key), dict)}
    if not parts:
        return {"status": "not run", "failures": [],
                "reason": "the spec configures no gate (neither evaluation.general_regression nor "
                          "evaluation.benchmarks); add one to the spec and run again"}
    failed = {key: part for key, part in parts.items() if part.get("status") == "failed"}
    general = parts.get("general_regression") or {}
    if failed:
        failures = [("benchmark " if key == "benchmarks" else "") + f
                    for key, part in failed.items() for f in part.get("failures") or ["see the run report"]]
        reason = "; ".join(f"{GATE_NAMES[key]} gate failed: " + "; ".join(part.get("failures") or ["see the run report"])
                           for key, part in failed.items())
        return {**general, "status": "failed", "failures": failures, "reason": reason}
    unrun = {key: part for key, part in parts.items() if part.get("status") != "passed"}
    if unrun:
        ran = [f"evaluation.{key} passed" for key in parts if key not in unrun]
        missing = [f"evaluation.{key} was not run ({part.get('reason') or 'see the run report'})"
                   for key, part in unrun.items()]
        return {**general, "status": "not run", "failures": [], "reason": ", but ".join(ran + ["; ".join(missing)])}
    return {**general, "status": "passed", "failures": []}


def activate(model_id: str, force: bool = False) -> dict[str, Any]:
    """Make MODEL the active one; returns the record appended (or the current state when already active).
    The version is looked up and verified under the registry's lock, so gc cannot remove it between the check
    and the record."""
    with _lock():
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
            why = gate["reason"] if gate["status"] == "failed" else "the gate was not run: " + gate["reason"]
            if not force:
                raise ActivationError(f"refusing to activate {model_id}: {why}; `tt models activate {model_id} "
                                      "--force` activates it anyway (recorded in the history)")
            overrode = why
        state = current()
        if state["model"] == entry["id"] and state.get("version") == entry.get("version"):
            return {"action": "none", "model": entry["id"], "version": entry.get("version"), "already_active": True}
        return _append({"action": "activate", "model": entry["id"], "version": entry.get("version"),
                        "manifest_sha256": entry.get("manifest_sha256"), "previous": state["model"],
                        "previous_version": state.get("version"), "gate": gate["status"],
                        "forced": overrode is not None, "overrode": overrode})


def rollback() -> dict[str, Any]:
    """Back to the previously active model, or to the base model when there is none."""
    with _lock():
        stack, _ = _stack(read_history())
        if not stack:
            raise ActivationError("no model is active; nothing to roll back (`tt models activate ID`)")
        leaving = stack.pop()["model"]
        back = stack[-1] if stack else None
        return _append({"action": "rollback", "model": back["model"] if back else None,
                        "version": back.get("version") if back else None, "previous": leaving,
                        "base_of": None if stack else leaving})
