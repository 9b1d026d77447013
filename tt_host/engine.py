"""Typed records that engine plugins hand to the host.

An engine plugin's `tt_engines()` hook yields `Engine` records. Everything the
host needs to validate a spec, build the engine's environment, run its stages
and check its prerequisites is described here; the host imports nothing else
from a plugin. Host API 1.1 added what `tt models`, `tt models export`,
`tt serve` and `tt init` need (`ModelKind`, `Export`, `Serve`, `Engine.starter`,
`Engine.spec_device`), so no host module knows an engine by name; 1.2 added export
formats besides Hugging Face (`ModelKind.formats`, `Export.quants`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

from tt_stagekit.sides import BASELINE_SIDE, CANDIDATE_SIDE

if TYPE_CHECKING:  # annotations only: the records stay importable below the spec layer
    from tt_host.spec.schema import BehaviorSpec


def _always(spec: BehaviorSpec) -> bool:
    return True


def _whole_spec(spec: BehaviorSpec) -> Mapping[str, Any]:
    return spec.model_dump(mode="json", exclude={"observers"})  # tracking settings are no stage input


def _top_level_device(spec: BehaviorSpec) -> Optional[str]:
    device = getattr(spec, "device", None)
    return device if isinstance(device, str) else None


@dataclass(frozen=True)
class Stage:
    """One step of an engine's pipeline, run as `python -m <module> REQUEST.json`.

    name:      folder name under the run directory and key in run.json.
    module:    importable module inside the engine environment.
    inputs:    host-side function returning every input the stage depends on
               (spec fields, file digests). Its JSON is hashed, with the
               fingerprints of the stages in `needs`, into the stage fingerprint.
    needs:     names of earlier stages whose outputs this stage reads; their
               fingerprints enter this one. None (the default): the stage just
               before it, so the fingerprints form a chain.
    reads_spec_text: whether the compiled system message and the rows (the
               spec's instruction and examples) are inputs of this stage for
               this spec (default: always). A stage that does not read them
               is not re-run when an example changes.
    replaceable: a finished (or started) stage whose inputs changed is run
               again from scratch: its folder `<run>/<name>/` is deleted first,
               so it must hold only this stage's outputs. When False (the
               default) such a change is refused: the run needs a new run
               directory (for expensive stages such as pretraining).
    enabled:   whether the stage runs for this spec (e.g. RL only when rl_steps > 0).
    evaluates: when set, the stage receives held-out prompts (ids and prompts,
               never answers) and writes predictions.jsonl; the host scores them
               and stores metrics under this prefix (e.g. "baseline").
    gets_train_rows: the stage receives the compiled training chat rows.
    gets_synthetic_rows: when the spec has a `synthesis` block, this stage's
               training rows also hold the rows the host's `synthesize` stage
               grew (marked `"source": "synthetic"`, weighted by
               `synthesis.weight`), and its fingerprint hashes that stage's
               (docs/synthesis.md). Set it on the stages that train.
    general:   "baseline" or "candidate": the stage answers the spec's
               general-regression prompts as that side of the gate
               (docs/evaluation.md). Defaults to `evaluates` when that is
               "baseline" or "candidate".
    benchmarks: the stage, as its gate side, also runs the spec's
               `evaluation.benchmarks` (lm-evaluation-harness) on its model and
               returns the scores as result.json `benchmarks`
               (docs/evaluation.md). `tt validate` refuses the block for an
               engine without such a stage on both sides.
    launch:    optional; returns the interpreter arguments that start the stage
               for this spec, instead of `-m <module>` (for example
               `-m torch.distributed.run --nproc_per_node 2 -m <module>`).
               The host appends the request path and knows nothing of them.
    description: one line for progress displays.
    """

    name: str
    module: str
    inputs: Callable[[BehaviorSpec], Mapping[str, Any]] = _whole_spec
    needs: Optional[tuple[str, ...]] = None
    reads_spec_text: Callable[[BehaviorSpec], bool] = _always
    replaceable: bool = False
    enabled: Callable[[BehaviorSpec], bool] = _always
    evaluates: Optional[str] = None
    gets_train_rows: bool = False
    gets_synthetic_rows: bool = False
    general: Optional[str] = None
    benchmarks: bool = False
    launch: Optional[Callable[[BehaviorSpec], Sequence[str]]] = None
    description: str = ""

    def arguments(self, spec: BehaviorSpec) -> list[str]:
        """Interpreter arguments that start this stage (before the request path)."""
        return list(self.launch(spec)) if self.launch is not None else ["-m", self.module]


GATE_SIDES = (BASELINE_SIDE, CANDIDATE_SIDE)  # the two sides of the general-regression gate (tt_host.evaluation.general_gate)


def gate_side(stage: Stage) -> Optional[str]:
    """Which side of the gate a stage answers the general set for (None: it does not)."""
    if stage.general is not None:
        return stage.general
    return stage.evaluates if stage.evaluates in GATE_SIDES else None


def evaluates_both_sides(stages: Iterable[Stage]) -> bool:
    """Whether an engine has a baseline and a candidate stage to answer the general set."""
    return set(GATE_SIDES) <= {gate_side(stage) for stage in stages}


def benchmarks_both_sides(stages: Iterable[Stage]) -> bool:
    """Whether an engine has a baseline and a candidate stage that run the spec's benchmarks."""
    return set(GATE_SIDES) <= {gate_side(stage) for stage in stages if stage.benchmarks}


def needs_error(stages: Sequence[Stage]) -> str | None:
    """Why an engine's `needs` declarations are unusable (None when they are fine)."""
    seen: set[str] = set()
    for stage in stages:
        for name in stage.needs or ():
            if name not in seen:
                return f"stage {stage.name!r} needs {name!r}, which is not a stage before it"
        seen.add(stage.name)
    return None


@dataclass(frozen=True)
class Check:
    """One doctor finding. status is "ok", "warn" or "fail"; hint says what to do next; data holds
    the measured figures for scripts (`tt doctor --json`), e.g. the folder and its free bytes."""

    name: str
    status: str
    detail: str = ""
    hint: str = ""
    data: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class DiskNeed:
    """Disk space a run of a spec will use, for `tt doctor`.

    folder: where the bytes go; None means the run directory. The host
    measures free space there (at the nearest existing parent), checks it is
    writable, and with `separate_disk` warns when it shares a filesystem
    with the run directory (a backup on the same disk dies with it).
    """

    name: str
    bytes: int
    detail: str = ""
    folder: Optional[Path] = None
    separate_disk: bool = False


# How a model of one kind is served (ModelKind.serve).
SERVE_EXPORT = "export"    # an engine format: exported first (Export, cached), the export served as a Hugging Face folder
SERVE_ON_BASE = "on_base"  # PEFT (LoRA) weights: their base model (info_file's base_model.path) plus this folder
SERVE_HF = "hf"            # a Hugging Face model folder, served as it is
SERVE_OWN = "own"          # only this engine's own server (Engine.serve) loads it
SERVE_WAYS = (SERVE_EXPORT, SERVE_ON_BASE, SERVE_HF, SERVE_OWN)


@dataclass(frozen=True)
class Export:
    """How `tt models export` writes a model of one kind as a folder other tools load.

    module:   run as `python -m <module> REQUEST.json` in this engine's environment (one-shot, see
              `tt_stagekit.protocol.run_export`); the request holds `source` (the model folder), `out`
              (a new folder to write), `model_id`, `system_message`, `system_message_sha256`. It writes
              `out` with an `artifact-manifest.json` (verified before tt renames it into place) and a
              `tt-export.json` recording `source.manifest_sha256` and `system_message`.
              None: the model folder is already in the target format and is copied verbatim.
    produces: the manifest kind of the written folder (declare it as a `ModelKind` too, so it is served).
    quants:   the `--quant` values it accepts, the default first (host API 1.2); the request then also holds
              `format` (the `--format` name) and `quant`. Empty: `--quant` is refused for it.
    """

    module: Optional[str]
    produces: str
    quants: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelKind:
    """A kind of model this engine's runs (or exports) produce: the `kind` of its artifact manifest.

    folder:    where a run keeps it, relative to the run directory (`"sft/model"`); its first part is the
               stage that made it. None: not made by a run (an export's kind).
    serve:     how `tt serve` serves it: one of SERVE_EXPORT, SERVE_ON_BASE, SERVE_HF, SERVE_OWN.
    info_file: a JSON file in the model folder with `system_message` (and, for SERVE_ON_BASE,
               `base_model.path`; for exports, `model_id`), read by `tt serve` and `tt models export`.
    export:    how `tt models export MODEL` writes it (None: it cannot be exported).
    export_merged: how `tt models export MODEL --merged` writes it (a model on a base merged into full
               weights); None: `--merged` is refused for it.
    base:      this kind is a run's base model: what `tt serve base` serves under a tuned model of the
               same run that has no base recorded of its own.
    formats:   other formats `tt models export MODEL --format NAME` writes it in, by name (host API 1.2;
               e.g. {"gguf": Export(...)}); `hf` is always `export`/`export_merged`.
    """

    kind: str
    folder: Optional[str] = None
    serve: str = SERVE_HF
    info_file: Optional[str] = None
    export: Optional[Export] = None
    export_merged: Optional[Export] = None
    base: bool = False
    formats: Mapping[str, Export] = field(default_factory=dict)


@dataclass(frozen=True)
class Serve:
    """How `tt serve` runs this engine's OpenAI-compatible server: `python -m <module> REQUEST.json`.

    The request holds `model_path`, `adapter_path` (or null), `model_name`, `system_message`, `host`,
    `port`, `max_concurrency`, `device` and `ready_file`; the API key comes in `TT_SERVE_API_KEY`. The
    server prints JSON-line events (a `ready` event with its `url` once listening) and writes the ready
    event to `ready_file`.

    hf_folders: the server loads any Hugging Face model folder, with PEFT (LoRA) weights on it when
                `adapter_path` is set: it serves SERVE_EXPORT, SERVE_ON_BASE and SERVE_HF kinds of any
                engine. False: it serves only this engine's SERVE_OWN kinds.
    """

    module: str
    hf_folders: bool = False


@dataclass(frozen=True)
class PipelineVocabulary:
    """The pipeline document steps (Pipeline v1's from-scratch vocabulary) this engine runs.

    runtime:  the documents' `runtime.engine` value this engine answers to.
    steps:    a step's kind (its `uses`, or an evaluate step's `evaluator`) -> the stages it runs, in any order
              (the engine's order decides); a kind the engine has no stage for is refused naming the step.
    settings: a step's kind -> {its `with` key: the field of the spec's `block` that decides it}; a document
              value that differs from the spec is a warning (the spec decides, a pipeline only selects stages).
    block:    the spec attribute holding those fields (e.g. the engine's own block).
    """

    runtime: str
    steps: Mapping[str, tuple[str, ...]]
    settings: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    block: str = ""


@dataclass(frozen=True)
class Engine:
    """An engine as its plugin describes it.

    runtime_project: folder holding the engine's runtime pyproject.toml + uv.lock
                     (a source checkout or an editable install); when both are
                     there the environment is `uv sync --locked
                     --no-default-groups` of that project with `sync_groups`.
    runtime_lock:    the engine's runtime lock shipped inside its wheel (a PEP 751
                     `pylock.runtime.toml`, written by `tt engines lock`); used
                     when there is no source project: `uv pip sync` of the lock,
                     then the engine itself without dependencies.
    sync_groups:     dependency groups that make the runtime (synced from the
                     project, exported into the shipped lock) besides the project's
                     own dependencies; the default `dev` group is never synced.
    doctor:          engine-specific checks; called with the validated spec (or
                     None) and the requested device.
    disk_needs:      optional; the disk space a run of the validated spec
                     will use (`DiskNeed` records), measured by `tt doctor`.
    min_examples:    fewest spec examples a real run needs.
    model_kinds:     the kinds of model its runs produce, best first: a run directory given to
                     `tt serve` / `tt models export` means its best finished one (`ModelKind`).
    serve:           how `tt serve` runs its server (`Serve`); None: it has none.
    starter:         fields `tt init --engine NAME` adds to the neutral starter spec; a string beginning
                     with "TODO: " is a placeholder `tt validate`/`tt run` refuse until replaced.
    spec_device:     the device a validated spec asks for ("auto", "cpu", ...) or None; the default reads
                     a top-level `device` field.
    pipeline_vocabulary: optional; the pipeline documents' from-scratch step vocabulary this engine runs
                     (`PipelineVocabulary`); every engine runs the behavior vocabulary (train, evaluate,
                     compare) from its stages' declarations.
    plan_notes:      optional (host API 1.4); lines `tt validate` prints, and `--json` carries as `plan`, about
                     what a run of the valid spec will need on this machine (a memory estimate, say).
    stage_server:    optional (host API 1.4); the engine module a warm stage server imports once before forking
                     stages (its `SERVED_STAGES` lists the stage modules it runs), used with TT_STAGE_SERVER=1
                     (tt_host.engines.stageserver; docs/operations.md "Stage server").
    host_api:        the HOST_API_VERSION this plugin was written for.
    """

    name: str
    spec_model: type[BehaviorSpec]
    stages: tuple[Stage, ...]
    runtime_project: Optional[Path]
    description: str = ""
    sync_groups: tuple[str, ...] = ()
    runtime_lock: Optional[Path] = None
    doctor: Optional[Callable[[Optional[BehaviorSpec], str], Iterable[Check]]] = None
    disk_needs: Optional[Callable[[BehaviorSpec], Iterable[DiskNeed]]] = None
    min_examples: int = 2
    model_kinds: tuple[ModelKind, ...] = ()
    serve: Optional[Serve] = None
    starter: Mapping[str, Any] = field(default_factory=dict)
    spec_device: Callable[[BehaviorSpec], Optional[str]] = _top_level_device
    pipeline_vocabulary: Optional[PipelineVocabulary] = None
    plan_notes: Optional[Callable[[BehaviorSpec], Iterable[str]]] = None
    stage_server: Optional[str] = None
    host_api: str = "1.0"
    # Filled in by the loader, not by plugins.
    distribution: str = field(default="", compare=False)
    distribution_version: str = field(default="", compare=False)
