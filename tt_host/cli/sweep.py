"""`tt sweep SPEC`: search the engine's settings on a selection split, score the held-out set once, report.

Runs in the host's interpreter. Everything given is checked before anything is created (the spec, the
sweep block, every searched value tried on the spec, the selection split): a problem exits 2 naming the
field. Then tt_host.sweeps runs the trials (its module docstrings say how), the winner's run, and writes the
sweep's report (tt_host.reports.sweep_report). `--json` prints `{"trials": [...], "winner": {...},
"optimism"}` (docs/json.md).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer

from tt_host.cli.common import JsonOption, console, emit_json, err, escape, fail
from tt_host.cli.running import DEVICES, QuietOption, SetOption, SpecArgument, VerboseOption, load_valid
from tt_stagekit.contract import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK

WAIT_S = 5.0  # how often a worker looks again while another worker's trials or the winner's run are running


def _refuse(loc: str, message: str, json_mode: bool) -> None:
    fail(f"{loc}: {message}", code=EXIT_INVALID, json_mode=json_mode)


def checked_block(loaded, plugins, sweep_file: Optional[Path], trials: Optional[int], json_mode: bool):
    """The sweep block, validated on its own and against the spec; exit 2 naming the field otherwise."""
    from tt_host.spec.loading import load_spec, read_json
    from tt_host.sweeps.block import check, probe_overrides

    if sweep_file is not None:
        raw, errors = read_json(sweep_file)
        if errors:
            _refuse(str(sweep_file), errors[0].msg, json_mode)
        where = str(sweep_file)
    elif loaded.sweep is None:
        _refuse("sweep", f"{loaded.path} has no `sweep` block; add one (docs/evaluation.md \"Sweeps\") or give "
                         "--sweep FILE", json_mode)
    else:
        raw, where = loaded.sweep, "sweep"
    result = check(raw, where)
    if result.errors:
        first = result.errors[0]
        _refuse(first.loc, first.msg + "".join(f"; {e.loc}: {e.msg}" for e in result.errors[1:]), json_mode)
    block = result.block
    if trials is not None:
        if not 1 <= trials <= 1000:
            _refuse("--trials", f"must be 1 to 1000, not {trials}", json_mode)
        block = block.model_copy(update={"trials": trials})
    for key, argument in probe_overrides(block):
        probed = load_spec(loaded.path, plugins, config=loaded.config, overrides=loaded.overrides + [argument])
        if probed.errors:
            _refuse(f"{where}.parameters.{key}", f"{argument.partition('=')[2]} is refused by the spec: "
                                                  f"{probed.errors[0].loc}: {probed.errors[0].msg}", json_mode)
    return block


def sweep(
    spec: Path = SpecArgument,
    sweep_file: Optional[Path] = typer.Option(None, "--sweep", help="A JSON file holding the sweep block "
                                              "(instead of the spec's `sweep`)."),
    trials: Optional[int] = typer.Option(None, "--trials", help="How many trials (overrides the block's)."),
    storage: Optional[str] = typer.Option(None, "--storage", help="A database URL (sqlite:///..., "
                                          "postgresql://...) holding the study, shared by several workers "
                                          "(default: study.db in the sweep's folder)."),
    device: Optional[str] = typer.Option(None, "--device", help="auto, cpu, cuda or mps (overrides the spec)."),
    verbose: bool = VerboseOption,
    quiet: bool = QuietOption,
    overrides: list[str] = SetOption,
    json_mode: bool = JsonOption,
) -> None:
    """Search settings on a selection split carved from the training examples; score the winner's held-out
    set once."""
    from tt_host.runs.progress import reporter
    from tt_host.sweeps.selection import SelectionError
    from tt_host.sweeps.sweep import Sweep, sweep_dir
    from tt_host.sweeps.study import storage_url

    if device is not None and device not in DEVICES:
        fail(f"--device must be one of {', '.join(DEVICES)}, not {device!r}", json_mode=json_mode)
    plugins, loaded = load_valid(spec, json_mode, overrides=tuple(overrides))
    block = checked_block(loaded, plugins, sweep_file, trials, json_mode)
    from tt_host.sweeps.selection import carve

    try:
        carved = carve(loaded, block.selection_fraction)
    except SelectionError as exc:
        _refuse("sweep.selection_fraction", str(exc), json_mode)
    folder = sweep_dir(loaded, block)
    folder.mkdir(parents=True, exist_ok=True)

    def say(line: str) -> None:
        if not quiet:
            err.print(line, markup=False, soft_wrap=True)

    state = Sweep(loaded, plugins, block, folder, storage_url(folder, storage), device,
                  reporter(json_mode, verbose, quiet), say)
    say(f"sweep {folder}: {block.trials} trials ({block.sampler}); {len(carved.selection)} selection prompts, "
        f"{len(carved.train)} trained on, {len(carved.held_out)} held out (scored once, for the winner)")
    try:
        code, report = _run(state, carved, json_mode)
    except KeyboardInterrupt:  # while waiting for other workers (a trial's own stop is handled by its run)
        fail("interrupted; run the same `tt sweep` again to continue (completed trials are kept)",
             code=EXIT_INTERRUPTED, json_mode=json_mode)
    if json_mode:
        winner = report.get("winner")
        emit_json({"ok": code == EXIT_OK, "trials": [{k: t[k] for k in ("number", "params", "selection_score", "run_dir", "state")}
                              for t in report["trials"]],
                   "winner": {k: winner[k] for k in ("number", "params", "run_dir", "model_id", "held_out_score")}
                   if winner else None,
                   "optimism": report.get("optimism")})
    else:
        console.print(f"report: {folder / 'report.md'}", markup=False)
        if report.get("winner"):
            w = report["winner"]
            console.print(f"winner: trial {w['number']}, selection {block.objective} {w['selection_score']:.4g} "
                          f"({w['selection_count']} prompts), held-out {_num(w['held_out_score'])} "
                          f"({w['held_out_count']} prompts), optimism {_num(report['optimism'])}", markup=False)
    raise typer.Exit(code)


def _num(value: Optional[float]) -> str:
    return "none" if value is None else f"{value:.4g}"


def _run(state, carved, json_mode: bool) -> tuple[int, dict[str, Any]]:
    """Run the trials, then the winner's run; (exit status, the sweep's report)."""
    from tt_host.reports.sweep_report import build_sweep_report, write_sweep_report
    from tt_host.runs.opening import RunRefused
    from tt_host.runs.store import RunInUseError
    from tt_host.sweeps.sweep import Interrupted, finish, pick_winner, run_trials, trials_table

    try:
        while True:
            run_trials(state, carved)
            rows = trials_table(state)
            if not any(r["state"] in ("running", "waiting") for r in rows):
                break
            time.sleep(WAIT_S)  # another worker's trials: the winner is chosen when every trial has ended
    except Interrupted:
        fail("interrupted; run the same `tt sweep` again to continue (completed trials are kept)",
             code=EXIT_INTERRUPTED, json_mode=json_mode)
    except (RunRefused, RunInUseError) as exc:
        fail(str(exc), code=EXIT_INVALID, json_mode=json_mode)
    winner = pick_winner(rows)
    facts = (state.loaded.spec.name, state.block.objective, state.block.sampler, len(carved.selection),
             len(carved.held_out), rows)
    if winner is None:
        write_sweep_report(state.folder, build_sweep_report(*facts))
        fail("no trial completed; see each trial's run folder for why", code=EXIT_FAILED, json_mode=json_mode)
    while True:
        try:
            final = finish(state, winner)
            break
        except RunInUseError as exc:  # another worker is running the winner's run: its result is reused after
            state.say(f"waiting: {exc}")
            time.sleep(WAIT_S)
    sweep_report = build_sweep_report(*facts, winner=winner, final=final)
    write_sweep_report(state.folder, sweep_report)
    if final.outcome.exit_code != EXIT_OK:
        err.print(f"[red]the winner's run {final.outcome.status}:[/] {escape(final.outcome.error or '')}")
    return final.outcome.exit_code, sweep_report
