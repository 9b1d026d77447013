"""Plugin module of the echo test engine: spec extension, stages, doctor checks, model kinds, export, server.

Everything `tt models export` and `tt serve` need is declared here (host API 1.1); tt_host has no code for
echo models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from tt_host.api import SERVE_OWN, BehaviorSpec, Check, Engine, Export, ModelKind, Serve, Stage, StrictModel, hookimpl


class EchoConfig(StrictModel):
    steps: int = Field(5, ge=1, le=100_000)
    step_seconds: float = Field(0.0, ge=0, le=60)
    fail_at_step: Optional[int] = Field(None, ge=1)
    learning_rate: float = Field(0.1, gt=0)
    reject_input: bool = False  # the prepare stage finds its input invalid (exit 2)
    ignore_stop: bool = False  # the train stage ignores SIGTERM/SIGINT (the host's kill must end it)
    eval_seconds: float = Field(0.0, ge=0, le=600)  # the evaluate stage sleeps this long first
    baseline: bool = False  # the baseline stage (echoes every prompt: the untrained base) runs


class EchoSpec(BehaviorSpec):
    engine: Literal["echo"] = "echo"
    echo: EchoConfig = Field(default_factory=EchoConfig)


def _train_inputs(spec: EchoSpec) -> dict:
    return {"steps": spec.echo.steps, "learning_rate": spec.echo.learning_rate}


def _doctor(spec: Optional[EchoSpec], device: str):
    yield Check("echo device", "ok" if device in ("auto", "cpu") else "fail", device,
                "" if device in ("auto", "cpu") else "the echo engine runs on cpu only")


@hookimpl
def tt_engines():
    yield Engine(
        name="echo",
        spec_model=EchoSpec,
        description="test engine: memorizes examples",
        stages=(
            Stage("prepare", "tt_engine_echo.stages.prepare", inputs=lambda s: {}, gets_train_rows=True),
            Stage("train", "tt_engine_echo.stages.train", inputs=_train_inputs, description="memorize",
                  gets_train_rows=True, gets_synthetic_rows=True),
            Stage("evaluate", "tt_engine_echo.stages.evaluate", inputs=lambda s: {}, evaluates="candidate"),
            # Last, so the stages before keep their fingerprints; the base model needs only the prepared rows.
            Stage("baseline", "tt_engine_echo.stages.baseline", inputs=lambda s: {}, needs=("prepare",),
                  evaluates="baseline", enabled=lambda s: s.echo.baseline),
        ),
        runtime_project=Path(__file__).resolve().parents[1],
        runtime_lock=Path(__file__).resolve().parent / "pylock.runtime.toml",  # written only by tests
        sync_groups=("runtime",),
        doctor=_doctor,
        model_kinds=(
            ModelKind("echo", "train/model", serve=SERVE_OWN, export=Export("tt_engine_echo.export", "echo-export")),
            ModelKind("echo-export", serve=SERVE_OWN, info_file="tt-export.json"),
        ),
        serve=Serve("tt_engine_echo.serve"),
        starter={"echo": {"steps": 5}},
        stage_server="tt_engine_echo.stages.warm",  # with TT_STAGE_SERVER=1 (docs/operations.md "Stage server")
        host_api="1.4",
    )
