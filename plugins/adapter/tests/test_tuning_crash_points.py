"""A kill at any durable write of the tuning stages (reference, preference, reinforce) resumes to the uninterrupted
run's end state.

Each stage runs on the session's tiny Llama after one SFT (prepare, prefetch, train), with the fewest steps that
write two checkpoints (3 steps, a checkpoint every step; the last step writes none). Its durable writes are
enumerated from an uninterrupted run traced with strace: every rename the stage process makes (a checkpoint's
`meta.json` and folder, the adapter's manifest and folder, `pairs.jsonl`, `result.json`) and every write to
reinforce's `rollout-prompts.jsonl`, which is appended, not renamed. For each crash point the stage process is
SIGKILLed there, before the call happens: strace holds its Nth rename (`--seccomp-bpf`, so that nothing else
stops it: a run killed under full tracing cost 3-4 times an untraced one; `--inject=rename:delay_enter=...`,
because the kernel ignores a signal injected at a seccomp stop) and the test sends SIGKILL (the kernel then skips
the held call); a write is killed by `--inject=write:signal=KILL:when=N`. Then the stage is resumed as the host
resumes a started stage that left no result: the same request with `resume` on. It must complete, and the stage folder must hold what the uninterrupted run left: the same visible
paths, the same adapter bytes (`adapter_model.safetensors` and every other file; the manifest without its time
fields), checkpoint weights, pairs and rollout log, and the same result without its timings.

The stage is run directly (the adapter tests' harness: `python -m <stage module> request.json`, the process the host
starts), not through `tt run --resume`: the killed process is the real stage, killed by the kernel, and the
resume is the request the host writes for it (host/runs/plan.py: a started stage with the same inputs
"continues" with `resume`); `tt`'s own writes and its resume decision are already killed at every write by
tests/host/runs/test_crash_points.py. Through `tt` each trial would also start `tt`, validate and replan (seconds
per trial) and the three stages would need a run each, for nothing this test checks.

By default (CI, where each stage process costs seconds of imports) one trial per stage: a stage with checkpoints
is killed at the publication of its first checkpoint (none published: the resume starts over, the checkpoint's
temp folder there, and makes the same calls as the uninterrupted run), then that resumed process is killed at its
last write (`result.json`: the adapter published, the rollout log complete; the next resume retrains from the last
checkpoint and replaces them); the reference stage (no checkpoints) at its last write. `TT_CRASH_POINTS=all`: one
trial per point found, killed there once. After each kill the stage folder must show it happened there (the
target not there, the publication before it there). The uninterrupted run's trace also shows each publication
durable (tt_stagekit.fsync_trace). The trials are printed with their count and time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tt_engine_adapter.testing.harness import MODULES, sentiment_run
from tt_stagekit.fsync_trace import undurable

STRACE = shutil.which("strace")
pytestmark = pytest.mark.skipif(STRACE is None, reason="needs strace (Debian: apt-get install strace)")

HP = {"n_epochs": 6, "batch_size": 4, "lora_rank": 8, "lora_dropout": 0.0, "learning_rate": 1e-2,
      "max_seq_length": 96, "max_new_tokens": 4, "eval_batch_size": 16, "checkpoint_interval_steps": 1,
      "warmup_ratio": 0.0}
PREFERENCE = {"loss": "dpo", "beta": 0.1, "simpo_gamma": 0.5, "pairs": "derived", "reference": "sft",
              "samples_per_prompt": 6, "temperature": 1.0, "max_new_tokens": None, "sft_weight": 0.0,
              "learning_rate": 5e-3, "n_epochs": 1, "max_steps": 3, "batch_size": 2}
GRPO = {"steps": 3, "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4, "temperature": 1.5,
        "learning_rate": 1e-3, "kl_beta": 0.1, "probe_groups": 2}
ROLLOUT_LOG = "rollout-prompts.jsonl"
STAGES = ("prepare", "prefetch", "train")
CALL = re.compile(r'^(\d+) +(rename|write)\((?:"[^"]*", "([^"]*)"|\d+<([^>]*)>)')


def _run(path: Path, model, block: str):
    run = sentiment_run(path, str(model), HP, n_train=16, n_eval=8)
    run.spec[block] = dict(PREFERENCE if block == "preference" else GRPO)
    return run


@pytest.fixture(scope="module")
def chain(tmp_path_factory, tiny_llama):
    """prepare, prefetch, train and the reference stage (traced: its points are `chain.points`) once; the tests copy
    them."""
    root = tmp_path_factory.mktemp("crash")
    run = _run(root / "run", tiny_llama, "preference")
    for stage in ("prepare", "prefetch", "train"):
        run.stage(stage)
    run.points = _traced(run, "reference", root / "reference.strace")
    return run


def _copied(chain, path: Path, block: str, stages=STAGES):
    """A run at `path` holding `stages` of `chain` (folders and results, paths rewritten)."""
    run = _run(path, chain.spec["base_model"], block)
    for stage in stages:
        shutil.copytree(chain.run_dir / stage, run.run_dir / stage)
        text = (run.run_dir / stage / "result.json").read_text().replace(str(chain.run_dir), str(run.run_dir))
        (run.run_dir / stage / "result.json").write_text(text)
        run.done[stage] = {"dir": str(run.run_dir / stage), "result": json.loads(text)}
    return run


def _stage(run, stage: str, prefix: list[str], resume: bool = False) -> subprocess.CompletedProcess:
    """The stage's real process (as the host starts it), under `prefix` (strace)."""
    request = run.request(stage, resume)
    return subprocess.run([*prefix, sys.executable, "-m", MODULES[stage], str(request)], cwd=run.run_dir,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True, timeout=600)


def _traced(run, stage: str, log: Path) -> list[tuple[str, int, str]]:
    """Run `stage` to the end under strace, check that every rename it made into its folder was durable
    (tt_stagekit.fsync_trace: what it published fsynced before, its folder after), and return its durable writes
    as (syscall, N, path in the stage folder): the stage process's Nth rename into the stage folder, or its Nth
    write (any descriptor) to the rollout log."""
    done = _stage(run, stage, [STRACE, "-f", "--seccomp-bpf", "-qq", "-y", "-e", "trace=rename,write,fsync,fdatasync",
                               "-o", str(log)])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run.finish(stage, done.returncode, done.stdout, done.stderr)
    stage_dir = run.run_dir / stage
    assert undurable(log, stage_dir) == []  # and each publication durable: fsynced before and after its rename
    calls = [m.groups() for m in map(CALL.match, log.read_text().splitlines()) if m]
    owner = {pid for pid, name, target, _ in calls if name == "rename" and target.startswith(f"{stage_dir}/")}
    assert len(owner) == 1, f"renames into {stage_dir} by {owner}: expected the stage process alone"
    counts, points = {"rename": 0, "write": 0}, []
    for pid, name, renamed, written in calls:
        if pid not in owner:
            continue
        counts[name] += 1
        target = renamed or written or ""
        if target.startswith(f"{stage_dir}/") and (name == "rename" or target.endswith(f"/{ROLLOUT_LOG}")):
            points.append((name, counts[name], target[len(str(stage_dir)) + 1:]))
    return points


def _kind(target: str) -> str:
    return re.sub(r"\d{9}", "N", re.sub(r"\.[a-z0-9_]{8}\.tmp$", ".tmp", target))


def _trials(points: list[tuple[str, int, str]]) -> list[list[tuple[str, int, str]]]:
    """The kills of each trial, in order. TT_CRASH_POINTS=all: one trial per point. Else one trial: a stage with
    checkpoints is killed at the publication of its first (no checkpoint left: the resume starts over, with the
    temp folder there), then that resumed process at its last write (everything published: the next resume
    retrains from the last checkpoint and replaces the adapter and the log); a stage without, at its last write."""
    if os.environ.get("TT_CRASH_POINTS") == "all":
        return [[point] for point in points]
    renames = [p for p in points if p[0] == "rename"]
    first = next((p for p in renames if _kind(p[2]) == "checkpoints/step-N"), None)
    return [[first, renames[-1]] if first else [renames[-1]]]


def _untimed(value):
    """`value` without what records when or how fast (`created`, `*seconds*`, `*per_second`)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k != "created" and "second" not in k}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _content(rel: str, path: Path):
    """What must match: the bytes, JSON without timings; PEFT writes adapter_config.json's target_modules from a
    set (their order follows the process's hash seed), so that list is compared sorted, and the file's sha256 in
    the manifest is left out."""
    if path.suffix != ".json":
        return path.read_bytes()
    value = _untimed(json.loads(path.read_text()))
    if rel.endswith("adapter_config.json") and isinstance(value.get("target_modules"), list):
        value["target_modules"] = sorted(value["target_modules"])
    if rel.endswith("artifact-manifest.json"):
        for entry in value.get("files", []):
            if entry.get("path") == "adapter_config.json":
                entry.pop("sha256", None)
    return value


def _end_state(stage_dir: Path) -> dict:
    """The visible paths of the stage folder, what it published (checkpoints: their weights) and the hidden
    leftovers (the temp file of an atomic write killed before its rename: garbage, not state)."""
    visible, files, leftovers = [], {}, []
    for path in sorted(stage_dir.rglob("*")):
        rel = str(path.relative_to(stage_dir))
        if _hidden(rel):
            leftovers.append(rel)
            continue
        if rel == "request.json":  # the harness's, rewritten for the resume
            continue
        visible.append(rel)
        if path.is_file() and (not rel.startswith("checkpoints/") or rel.endswith(".safetensors")):
            files[rel] = _content(rel, path)
    return {"visible": visible, "files": files, "leftovers": leftovers}


def _differences(point: str, state: dict, reference: dict) -> list[str]:
    if state["visible"] != reference["visible"]:
        return [f"{point}: resumed, but the paths differ: {state['visible']} != {reference['visible']}"]
    out = []
    for name in sorted(reference["files"]):
        mine, theirs = state["files"][name], reference["files"][name]
        if mine != theirs:
            shown = (f"{len(mine)} bytes, not {len(theirs)}" if isinstance(mine, bytes) and name.endswith(".safetensors")
                     else f"{str(mine)[:600]}\n    the uninterrupted run's: {str(theirs)[:600]}")
            out.append(f"{point}: resumed, but {name} differs: {shown}")
    return out


def _killed(run, stage: str, name: str, n: int, resume: bool) -> int:
    """The stage's exit status, killed by SIGKILL at its Nth `name` call, before the call happens.

    A rename: strace (--seccomp-bpf: no other call stops the process, so it runs at full speed; the kernel ignores
    a signal injected at such a stop) holds the Nth rename (`delay_enter`) and logs it; once logged, the stage is
    sent SIGKILL there. A write (TT_CRASH_POINTS=all only): `--inject=write:signal=KILL:when=N` without seccomp,
    the Nth write of each process (several processes write; only renames are the stage's alone)."""
    if name != "rename":
        return _stage(run, stage, [STRACE, "-f", "-qq", "-o", os.devnull, "-e", f"trace={name}",
                                   f"--inject={name}:signal=KILL:when={n}"], resume=resume).returncode
    log = run.run_dir.parent / f"{stage}-kill.strace"
    log.unlink(missing_ok=True)
    proc = subprocess.Popen([STRACE, "-f", "--seccomp-bpf", "-qq", "-o", str(log), "-e", f"trace={name}",
                             f"--inject={name}:delay_enter=600s:when={n}", sys.executable, "-m", MODULES[stage],
                             str(run.request(stage, resume))], cwd=run.run_dir, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        pid = (children.read_text().split() or [""])[0] if children.exists() else ""
        calls = log.read_text().splitlines() if pid and log.exists() else []
        if sum(_is_call(line, pid, name) for line in calls) >= n:
            os.kill(int(pid), signal.SIGKILL)  # held at its Nth call: the kernel skips the call (the kill is pending)
            proc.kill()  # strace would sit out its delay; without it the stage ends (killed) at once
            proc.wait(timeout=60)
            stat = Path(f"/proc/{pid}/stat")
            while stat.exists() and stat.read_text().split()[2] not in ("Z", "X") and time.monotonic() < deadline:
                time.sleep(0.01)
            return -signal.SIGKILL
        time.sleep(0.05)
    proc.kill()
    return proc.wait(timeout=60)


def _is_call(line: str, pid: str, name: str) -> bool:
    """Whether a line of `strace -f -o` (the pid, padded with spaces, then the call) starts `pid`'s call `name`."""
    parts = line.split(None, 1)
    return len(parts) == 2 and parts[0] == pid and parts[1].startswith(f"{name}(")


def _missed(stage_dir: Path, points: list, point: tuple[str, int, str]) -> str:
    """Why the stage folder shows that a kill did not happen at `point` (a rename: its target is absent; a write
    to the log: the lines before it are there, not it; the publication before it is there), or ""."""
    name, _, target = point
    if name == "rename" and (stage_dir / target).exists():
        return f"{target} is there"
    if name == "write":  # a line of the rollout log: the lines before it are there, not it
        lines = len((stage_dir / target).read_bytes().splitlines()) if (stage_dir / target).exists() else 0
        written = sum(1 for p in points[:points.index(point)] if p[0] == "write")
        if lines != written:
            return f"{target} has {lines} lines, not {written}"
    before = [p[2] for p in points[:points.index(point)] if p[0] == "rename" and not _hidden(p[2])]
    if before and not (stage_dir / before[-1]).exists():
        return f"{before[-1]}, published before it, is not there"
    return ""


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in Path(rel).parts)


def _crash_and_resume(run, stage: str, points, trials, reference: dict) -> tuple[list[str], list[str]]:
    """Each trial: a fresh stage folder, the stage killed at each of its points in turn (every run after the first
    a resume), then resumed to the end; (trials tried, what went wrong)."""
    tried, failed = [], []
    for kills in trials:
        shutil.rmtree(run.run_dir / stage)
        run.done.pop(stage, None)
        point = f"{stage}: " + ", then resumed and killed at ".join(f"{name} #{n} {target}" for name, n, target in kills)
        tried.append(point)
        for index, (name, n, target) in enumerate(kills):
            code = _killed(run, stage, name, n, resume=index > 0)
            missed = _missed(run.run_dir / stage, points, (name, n, target))
            if code != -signal.SIGKILL or missed:
                failed.append(f"{point}: the stage was not killed at {name} #{n} {target} (exit {code}"
                              f"{'; ' + missed if missed else ''})")
                break
        else:
            resumed = _stage(run, stage, [], resume=True)
            if resumed.returncode != 0:
                failed.append(f"{point}: the resume exited {resumed.returncode}: {resumed.stderr[-1500:]}")
                continue
            state = _end_state(run.run_dir / stage)
            leftovers = state.pop("leftovers")
            if leftovers:
                tried[-1] += f" (left behind: {', '.join(leftovers)})"
            wrong = _differences(point, state, reference)
            if wrong:
                failed.append("\n  ".join(wrong))
    return tried, failed


def _check(run, stage: str, points, reference: dict, wanted: set[str], capsys, started: float) -> None:
    kinds = {_kind(p[2]) for p in points}
    assert wanted <= kinds, (wanted, sorted(kinds))
    assert not reference.pop("leftovers", None)
    tried, failed = _crash_and_resume(run, stage, points, _trials(points), reference)
    with capsys.disabled():
        print(f"\n{stage}: {len(points)} crash points found, {len(tried)} trial(s), {len(tried) - len(failed)} "
              f"resumed to the uninterrupted end state ({time.monotonic() - started:.0f} s):\n  " + "\n  ".join(tried))
    assert not failed, "\n".join(failed)


def _traced_check(run, stage: str, tmp_path: Path, wanted: set[str], capsys) -> None:
    """The stage's uninterrupted traced run (its points and end state), then its trials."""
    started = time.monotonic()
    points = _traced(run, stage, tmp_path / f"{stage}.strace")
    _check(run, stage, points, _end_state(run.run_dir / stage), wanted, capsys, started)


def test_a_kill_at_any_write_of_the_reference_stage_resumes_to_the_same_pairs(chain, tmp_path, capsys):
    run = _copied(chain, tmp_path / "run", "preference", STAGES + ("reference",))
    _check(run, "reference", chain.points, _end_state(run.run_dir / "reference"), {"pairs.jsonl", "result.json"},
           capsys, time.monotonic())


def test_a_kill_at_any_write_of_the_preference_stage_resumes_to_the_same_adapter(chain, tmp_path, capsys):
    run = _copied(chain, tmp_path / "run", "preference", STAGES + ("reference",))
    _traced_check(run, "preference", tmp_path, {"checkpoints/.step-N.tmp/meta.json", "checkpoints/step-N",
                                                ".adapter.tmp/artifact-manifest.json", "adapter", "result.json"},
                  capsys)


def test_a_kill_at_any_write_of_the_reinforce_stage_resumes_to_the_same_adapter_and_rollout_log(chain, tmp_path,
                                                                                               capsys):
    run = _copied(chain, tmp_path / "run", "reinforcement")
    _traced_check(run, "reinforce", tmp_path, {"checkpoints/.step-N.tmp/meta.json", "checkpoints/step-N",
                                               ".adapter.tmp/artifact-manifest.json", "adapter", "result.json",
                                               ROLLOUT_LOG}, capsys)
