"""`tt data preview`: the training data a spec would get from its teacher (docs/synthesis.md)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tt_host.cli.common import JsonOption, console, emit_json, err, escape, fail, load_plugins

app = typer.Typer(no_args_is_help=True, help="Training data grown by a teacher model (the spec's synthesis block).")


@app.command()
def preview(
    spec: Path = typer.Argument(Path("tunedtensor.json"), help="Path to the spec (default: ./tunedtensor.json)."),
    sample: int = typer.Option(3, "--sample", min=0, max=100, help="Rows to ask the teacher for (cached, so the run "
                               "reuses them); 0 sends nothing and shows only rows the cache holds."),
    json_mode: bool = JsonOption,
) -> None:
    """Show the requests synthesis would send and a few rows it would keep, before a run spends on them."""
    from tt_host.errors import TTError
    from tt_host.spec.loading import load_spec
    from tt_host.synthesis.preview import preview as build

    loaded = load_spec(spec, load_plugins())
    if not loaded.valid:
        first = loaded.errors[0]
        fail(f"{loaded.path}: invalid spec: {first.loc}: {first.msg} (`tt validate` lists every error)",
             json_mode=json_mode, errors=[e.as_dict() for e in loaded.errors])
    if loaded.spec.synthesis is None:
        fail(f"{loaded.path} has no synthesis block; add one (docs/synthesis.md)", json_mode=json_mode)
    try:
        shown = build(loaded.spec, loaded.path, loaded.compiled, sample)
    except TTError as exc:
        fail(str(exc), code=exc.exit_code, json_mode=json_mode)
    for warning in shown["cache_warnings"]:
        err.print(f"[yellow]{escape(warning)}[/]")
    if json_mode:
        emit_json(shown)
        return
    teacher = shown["teacher"]
    console.print(f"teacher {escape(teacher['model'])} at {escape(teacher['url'])}; {escape(teacher['key'])}")
    console.print(f"{shown['rows']} rows wanted, at most {shown['request_budget']} requests; cache {escape(shown['cache'])}")
    console.print("[bold]request for new inputs[/]")
    console.print(escape(json.dumps(shown["inputs_request"]["messages"], indent=2, ensure_ascii=False)))
    console.print("[bold]request for an answer[/]")
    console.print(escape(json.dumps(shown["answer_request"]["messages"], indent=2, ensure_ascii=False)))
    console.print(f"[bold]{len(shown['sample_rows'])} sample row(s)[/] ({shown['requests_sent']} requests sent)")
    for row in shown["sample_rows"]:
        console.print(f"- {escape(row['messages'][1]['content'])}\n  → {escape(row['messages'][2]['content'])}")
    if not shown["sample_rows"] and not sample:
        err.print("no rows cached yet; --sample N asks the teacher for N")
