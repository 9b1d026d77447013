"""Crash at every durable write of one run, then resume: the end state is always the uninterrupted run's.

One run is `tt run SPEC --resume RUN` of the echo test engine (two training steps, a checkpoint each) then
`tt models activate MODEL --force`. Its durable writes are enumerated from an uninterrupted reference
run traced with strace: every rename `tt` makes (spec.json, run.json, stage requests, the registry entry,
the reports) and the activation history's append, and every atomic write of the stages (results, the
checkpoint `state.json`, the model manifest). Each is a crash point:

- `tt`'s own writes: `strace -f --inject=SYSCALL:signal=KILL:when=N` kills `tt` at its Nth rename (or
  write to the history) — strace counts each process's calls, and every stage makes fewer renames than `tt`
  has made before it starts, so only `tt` is hit;
- a stage's: the echo engine's fault hook (`TT_ECHO_KILL_AT=MODULE:N`) kills that stage at its Nth atomic
  write, between the temporary file and the rename.

After each crash (strace returns once every traced process has exited: nothing of the crashed run is
left), the run is resumed as a script would: `tt run --resume` again, then the activation unless the model
is already active. Every time it must complete, and the model files, the registry and the history
(without timestamps) must equal the reference's. The points are printed with their count. By default the
first write of each file and of each stage runs (13 points); `TT_CRASH_POINTS=all` runs every point (23:
16 renames and the history's append by tt, 6 stage writes).

It runs twice: with plain stages, and with every stage forked by the warm stage server (TT_STAGE_SERVER=1,
docs/operations.md "Stage server"; the echo engine's warm module serves all its stages), where `tt`'s kill also
ends the server and a stage's kill is the forked child's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TT_BIN, base_env, echo_spec, write_spec
from plugin_site import echo_site

STRACE = shutil.which("strace")
STAGES = ("prepare", "train", "evaluate")
MODEL = "capitals-run-echo"
SYSCALL = re.compile(r'^(\d+) +(rename|write)\((?:"[^"]*", "([^"]*)"|\d+<([^>]*)>)')


class Sequence:
    """The run and the activation in one place (a fixed TT_HOME and run folder, so paths compare equal)."""

    def __init__(self, root: Path, served: bool = False):
        self.root, self.home, self.run = root, root / "tt-home", root / "run"
        self.env = base_env(root, echo_site(root / "site"))
        self.env["TT_STAGE_SERVER"] = "1" if served else "0"
        self.spec = write_spec(root / "s", echo_spec(steps=2, step_seconds=0))

    def reset(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.run, ignore_errors=True)

    def commands(self) -> list[list[str]]:
        return [[TT_BIN, "run", str(self.spec), "--resume", str(self.run), "--json"],
                [TT_BIN, "models", "activate", MODEL, "--force", "--json"]]

    def tt(self, command: list[str], prefix: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *command], env=dict(self.env, **env), cwd=self.root, capture_output=True,
                              text=True, timeout=600)

    def resume(self) -> None:
        """What a script does after a crash: resume the run, then activate unless the model is active."""
        ran = self.tt(self.commands()[0])
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
        active = self.tt([TT_BIN, "models", "active", "--json"])
        if MODEL not in active.stdout:
            activated = self.tt(self.commands()[1])
            assert activated.returncode == 0, activated.stdout + activated.stderr

    def end_state(self) -> dict:
        """The run's status, the model's files (the run's and the registry's copy), the registry entries and
        the history, without the moments they were written at."""
        models = self.home / "models"
        history = [untimed(json.loads(line)) for line in (self.home / "activations.jsonl").read_text().splitlines()
                   if line.strip()]
        return {
            "status": json.loads((self.run / "run.json").read_text())["status"],
            "model": {str(p.relative_to(self.root)): p.read_bytes()
                      for folder in (self.run / "train" / "model", models / "versions")
                      for p in sorted(folder.rglob("*")) if p.is_file()},
            "registry": {p.name: untimed(json.loads(p.read_text())) for p in sorted(models.glob("*.json"))},
            "history": history,
        }


def untimed(value):
    """`value` without the keys that record when (`at`, `*_at`) or by whom (`user`) it was written."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not (k in ("at", "user") or k.endswith("_at"))}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def traced_points(seq: Sequence, trace_dir: Path) -> tuple[list[tuple[int, str, int, str]], list[tuple[str, int]]]:
    """From a traced reference: (command index, syscall, N, target) for each durable write `tt` itself makes,
    and (stage module, N) for each rename a stage makes (its atomic writes, in order)."""
    points, stage_writes = [], {}
    for index, command in enumerate(seq.commands()):
        log = trace_dir / f"trace-{index}.log"
        done = seq.tt(command, (STRACE, "-f", "-qq", "-y", "-e", "trace=rename,write", "-o", str(log)))
        assert done.returncode == 0, done.stdout + done.stderr
        lines = log.read_text().splitlines()
        host = lines[0].split()[0]  # the first traced process is the command's own
        counts = {"rename": 0, "write": 0}
        for line in lines:
            match = SYSCALL.match(line)
            if not match:
                continue
            pid, name, target = match.group(1), match.group(2), match.group(3) or match.group(4)
            if pid != host:
                stage = Path(target).relative_to(seq.run).parts[0] if target.startswith(f"{seq.run}/") else None
                if name == "rename" and stage in STAGES:
                    stage_writes[stage] = stage_writes.get(stage, 0) + 1
                continue
            counts[name] += 1
            durable = target.startswith((str(seq.run), str(seq.home)))
            if durable and (name == "rename" or target.endswith("activations.jsonl")):
                points.append((index, name, counts[name], target.replace(str(seq.root), "")))
    stages = [(f"tt_engine_echo.stages.{stage}", n) for stage in STAGES for n in range(1, stage_writes.get(stage, 0) + 1)]
    return points, stages


def bounded(points: list) -> list:
    """All points with TT_CRASH_POINTS=all; else the first write of each file `tt` writes and each stage's first
    atomic write (the first checkpoint in train)."""
    if os.environ.get("TT_CRASH_POINTS") == "all":
        return points
    firsts: dict = {}
    for kind, point in points:
        firsts.setdefault(point[3] if kind == "tt" else point[0], (kind, point))
    return list(firsts.values())


@pytest.mark.parametrize("served", [False, True], ids=["plain", "stage-server"])
def test_a_crash_at_every_durable_write_resumes_to_the_uninterrupted_end_state(tmp_path, capsys, served):
    assert STRACE, "strace is needed (Debian: apt-get install strace); .ci/run installs it"
    started = time.monotonic()
    seq = Sequence(tmp_path, served)
    prepared = seq.tt([TT_BIN, "engines", "prepare", "echo", "--json"])  # built before tracing: the trace is tt's
    assert prepared.returncode == 0, prepared.stdout[-2000:] + prepared.stderr[-2000:]
    traced, stage_writes = traced_points(seq, tmp_path)
    reference = seq.end_state()
    assert reference["status"] == "completed" and reference["history"] and reference["registry"]
    targets = {t for _, _, _, t in traced}
    for wanted in ("/run/spec.json", "/run/run.json", "/run/report.json", f"/tt-home/models/{MODEL}.json",
                   "/tt-home/activations.jsonl"):
        assert wanted in targets, (wanted, sorted(targets))

    tried: list[str] = []
    failed: list[str] = []
    host_points, stage_points = _split(bounded([("tt", p) for p in traced] + [("stage", p) for p in stage_writes]))
    for index, name, n, target in host_points:
        seq.reset()
        for earlier in seq.commands()[:index]:
            assert seq.tt(earlier).returncode == 0
        crashed = seq.tt(seq.commands()[index], (STRACE, "-f", "-qq", "-o", os.devnull, "-e", f"trace={name}",
                                                 f"--inject={name}:signal=KILL:when={n}"))
        assert crashed.returncode != 0, f"tt was not killed at its {name} #{n} ({target})"
        tried.append(f"tt {name} #{n} {target}")
        failed.extend(_resumed_to(seq, reference, tried[-1]))
    assert len(stage_writes) >= 4, stage_writes  # results and the training checkpoints
    for module, n in stage_points:
        seq.reset()
        crashed = seq.tt(seq.commands()[0], TT_ECHO_KILL_AT=f"{module}:{n}")
        assert crashed.returncode != 0, f"{module} was not killed at its write #{n}"
        tried.append(f"{module} write #{n}")
        failed.extend(_resumed_to(seq, reference, tried[-1]))
    if served:  # the stages did go through the server
        assert "forked by the warm server" in (seq.run / "logs" / "train.log").read_text()
    with capsys.disabled():
        print(f"\n{len(tried)} crash points tried{' through the stage server' if served else ''}, {len(tried) - len(failed)} resumed to the uninterrupted end state "
              f"({len(traced)} of tt's own writes found; {time.monotonic() - started:.0f} s):\n  " + "\n  ".join(tried))
    assert not failed, "\n".join(failed)


def _split(points: list) -> tuple[list, list]:
    return [p for kind, p in points if kind == "tt"], [p for kind, p in points if kind == "stage"]


def _resumed_to(seq: Sequence, reference: dict, point: str) -> list[str]:
    """[] when resuming after the crash at `point` reached `reference`; else what went wrong."""
    try:
        seq.resume()
        state = seq.end_state()
    except (AssertionError, OSError, ValueError, KeyError) as exc:
        return [f"{point}: {str(exc)[:400]}"]
    return [] if state == reference else [f"{point}: the end state differs: {state} != {reference}"]
