"""The host-stage contract in one place (docs/protocol.md): exit codes, errors, request, result, serve request.

The host (`tt_host`) and every engine import these; nothing else declares them. The values are the wire
format: `StageRequest`'s fields are request.json's keys in the order the host writes them, `StageResult`
reads and writes result.json, `ServeRequest` is the request `tt serve` hands an engine's server and holds
the one check of its bounds that both sides call. How a request is parsed into these dataclasses (each
value checked against its annotation) is `tt_stagekit.stageconfig`. Stdlib only; imports nothing of tt.
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, Optional

# ------------------------------------------------------------------ exit codes

EXIT_OK = 0  # completed; the result file exists
EXIT_FAILED = 1  # failed; the last error log event (or result.error) says why
EXIT_INVALID = 2  # the input was invalid before any work was done
EXIT_INTERRUPTED = 130  # stopped by SIGTERM/SIGINT after saving its state
EXIT_CODES = (EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED)


class StageError(Exception):
    """The stage failed (exit 1); the message names the file and line, or the field, and what to do."""

    exit_code = EXIT_FAILED


class InvalidInput(StageError):
    """The stage found its input invalid before doing any work (exit 2)."""

    exit_code = EXIT_INVALID


class Interrupted(Exception):
    """Raised after the stage saved its state in answer to SIGTERM/SIGINT (exit 130)."""


# ------------------------------------------------------------------ request.json

@dataclasses.dataclass(frozen=True)
class EarlierStage:
    """A completed earlier stage of the run: its folder and its result.json (free-form `outputs`)."""

    dir: Path
    result: dict[str, Any]

    def output(self, key: str) -> Any:
        return (self.result.get("outputs") or {}).get(key)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageRequest:
    """The engine-neutral fields of `request.json` (docs/protocol.md), in the order the host writes them.

    Engines subclass it with a typed `spec`. Fields without a default must be in every request.
    """

    extra_keys: ClassVar[str] = "ignore"  # the protocol may grow; a stage reads what it declares

    protocol: int = 1
    engine: str = ""
    stage: str = ""
    run_dir: Path
    stage_dir: Path
    result_path: Path
    spec: Any
    spec_dir: Optional[Path] = None
    system_message: str = ""
    system_message_sha256: str = ""
    train_rows: tuple[dict[str, Any], ...] = ()
    eval_prompts: tuple[dict[str, Any], ...] = ()
    general_prompts: tuple[dict[str, Any], ...] = ()
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    resume: bool = False
    fingerprint: str = ""
    stages: Mapping[str, EarlierStage] = dataclasses.field(default_factory=lambda: types.MappingProxyType({}))

    def output(self, stage: str, key: str) -> Any:
        """An earlier stage's `outputs[key]`, or None when that stage has not completed in this run."""
        earlier = self.stages.get(stage)
        return earlier.output(key) if earlier is not None else None

    def to_json(self) -> dict[str, Any]:
        """request.json as the host writes it: keys in field order, paths as strings, rows as lists,
        each earlier stage as {"dir", "result"}."""
        body: dict[str, Any] = {}
        for f in dataclasses.fields(StageRequest):
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            elif f.name == "stages":
                value = {name: {"dir": str(earlier.dir), "result": earlier.result} for name, earlier in value.items()}
            body[f.name] = value
        return body


def request_fields() -> tuple[str, ...]:
    """request.json's keys, in the order the host writes them."""
    return tuple(f.name for f in dataclasses.fields(StageRequest))


def required_request_fields() -> tuple[str, ...]:
    """The keys a request must hold (the others have the defaults `request_defaults` gives)."""
    return tuple(f.name for f in dataclasses.fields(StageRequest)
                 if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def request_defaults() -> dict[str, Any]:
    """The JSON value each optional request key stands for when a request leaves it out (fresh lists and dicts)."""
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(StageRequest):
        if f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = dict(f.default_factory())
        elif f.default is not dataclasses.MISSING:
            defaults[f.name] = list(f.default) if isinstance(f.default, tuple) else f.default
    return defaults


# ------------------------------------------------------------------ result.json

RESULT_DEFAULTS: dict[str, Any] = {"status": "completed", "metrics": {}, "series": {}, "outputs": {},
                                   "artifacts": [], "notes": []}


def result_body(result: Mapping[str, Any]) -> dict[str, Any]:
    """result.json as a stage writes it: the protocol's defaults, then what the stage returned (in its order)."""
    body = {key: type(value)(value) for key, value in RESULT_DEFAULTS.items()}
    body.update(result)
    return body


@dataclasses.dataclass(frozen=True, kw_only=True)
class Artifact:
    """One entry of result.json `artifacts`: a folder holding an `artifact-manifest.json`."""

    kind: str = "model"
    path: str
    manifest: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, **({"manifest": self.manifest} if self.manifest else {})}


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageResult:
    """A stage's result.json (docs/protocol.md, Result), read the way the host reads it.

    `from_json` is lenient where the host always was (a missing or null field is empty, notes that are
    not strings are dropped); keys the protocol does not name are kept in `extra`.
    """

    status: Optional[str] = "completed"
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    series: dict[str, Any] = dataclasses.field(default_factory=dict)
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    artifacts: tuple[Artifact, ...] = ()
    notes: tuple[str, ...] = ()
    predictions: Optional[str] = None  # a file under stage_dir: {"id", "prediction"} rows
    general_predictions: Optional[str] = None  # the same, for the general prompts
    # lm-eval scores of the spec's evaluation.benchmarks: {task: {metric: value}} (docs/evaluation.md)
    benchmarks: Optional[dict[str, dict[str, float]]] = None
    error: Optional[str] = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    NAMED: ClassVar[tuple[str, ...]] = ("status", "metrics", "series", "outputs", "artifacts", "notes",
                                        "predictions", "general_predictions", "benchmarks", "error")

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StageResult":
        """The result read from result.json's object (an artifact without `path` raises KeyError('path'))."""
        return cls(
            status=data.get("status"),
            metrics=dict(data.get("metrics") or {}),
            series=dict(data.get("series") or {}),
            outputs=dict(data.get("outputs") or {}),
            artifacts=tuple(Artifact(kind=a.get("kind", "model"), path=a["path"], manifest=a.get("manifest"))
                            for a in data.get("artifacts") or []),
            notes=tuple(n for n in data.get("notes") or [] if isinstance(n, str)),
            predictions=data.get("predictions") or None,
            general_predictions=data.get("general_predictions") or None,
            benchmarks=data.get("benchmarks") if isinstance(data.get("benchmarks"), dict) else None,
            error=data.get("error"),
            extra={k: v for k, v in data.items() if k not in cls.NAMED},
        )

    def to_json(self) -> dict[str, Any]:
        """The result.json object a stage writes for this result (`protocol.write_result` writes it)."""
        body: dict[str, Any] = {"status": self.status, "metrics": dict(self.metrics), "series": dict(self.series),
                                "outputs": dict(self.outputs), "artifacts": [a.to_json() for a in self.artifacts],
                                "notes": list(self.notes)}
        for key in ("predictions", "general_predictions", "benchmarks", "error"):
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        body.update(self.extra)
        return body


# ------------------------------------------------------------------ the serve request

@dataclasses.dataclass(frozen=True, kw_only=True)
class ServedModel:
    """One adapter a multi-adapter server serves on its base (`tt serve A B ...`, docs/serving.md "Many
    adapters"): its registered id and version, its verified folder and the sha256 of its artifact-manifest.json
    (the server loads it only while that digest and every file still match), and its spec's system message."""

    name: str
    path: str
    manifest_sha256: str
    version: Optional[int] = None
    system_message: Optional[str] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeRequest:
    """The request `tt serve` writes for an engine's server (docs/serving.md, docs/plugins.md `Serve`).

    The defaults are `tt serve`'s. `check_bounds` is the one check of the numeric limits and the device:
    the host calls it on its options before starting anything and the server on the request it reads,
    with the same messages (named by `tt serve`'s options, which is where a user sets them).
    """

    extra_keys: ClassVar[str] = "ignore"

    model_path: str = ""
    adapter_path: Optional[str] = None
    model_name: str = ""
    system_message: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 8000
    max_concurrency: int = 8
    device: Optional[str] = "auto"  # null: auto
    ready_file: Optional[str] = None
    allowed_hosts: Optional[tuple[str, ...]] = ()  # null: none
    default_max_tokens: Optional[int] = None
    header_timeout: float = 10.0
    max_queue: int = 64
    queue_timeout: float = 60.0
    max_batch_tokens: Optional[int] = None
    max_connections: int = 1000
    send_timeout: float = 30.0
    body_timeout: float = 30.0
    default_temperature: Optional[float] = None  # a request without `temperature` samples at this (null: 1.0)
    default_top_p: Optional[float] = None  # ... without `top_p` (null: 1.0)
    served_models: tuple[ServedModel, ...] = ()  # several adapters on model_path (then adapter_path is null)
    max_resident: Optional[int] = None  # adapters resident at once (least recently used evicted); null: all
    activation_file: Optional[str] = None  # activations.jsonl: `model: "active"` is its active served adapter
    host_channel: bool = False  # stdin carries the host's answers to `POST /admin/adapters` (tt serve sets it)
    prefix_cache_mb: int = 256  # MiB of prompt starts' keys and values kept across requests (0: off); bounds below
    PREFIX_CACHE_MB_MAX: ClassVar[int] = 1 << 20

    def to_json(self) -> dict[str, Any]:
        """The request file as `tt serve` writes it: keys in field order, tuples as lists."""
        def plain(value: Any) -> Any:
            if isinstance(value, tuple):
                return [plain(item) for item in value]
            return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value

        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(ServeRequest)}

    def check_bounds(self) -> None:
        """InvalidInput (exit 2) naming the first limit out of its range."""
        if not 0 <= self.port <= 65535:
            raise InvalidInput("--port must be between 0 and 65535")
        if not 1 <= self.max_concurrency <= 1024:
            raise InvalidInput("--max-concurrency must be between 1 and 1024")
        if (self.device or "auto") not in ("auto", "cpu", "cuda", "mps"):
            raise InvalidInput(f"--device must be one of auto, cpu, cuda, mps, not {self.device!r}")
        if not 0 <= self.max_queue <= 100000:
            raise InvalidInput("--max-queue must be between 0 and 100000")
        if not 0 < self.queue_timeout <= 86400:
            raise InvalidInput("--queue-timeout must be a number of seconds between 0 and 86400")
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise InvalidInput("--max-batch-tokens must be at least 1")
        if self.default_max_tokens is not None and self.default_max_tokens < 1:
            raise InvalidInput("--default-max-tokens must be at least 1")
        if self.default_temperature is not None and not 0 <= self.default_temperature <= 2:
            raise InvalidInput("--temperature must be a number between 0 and 2")
        if self.default_top_p is not None and not 0 < self.default_top_p <= 1:
            raise InvalidInput("--top-p must be a number greater than 0 and at most 1")
        if not 0 < self.header_timeout <= 3600:  # no option: a server run by hand sets it in the request
            raise InvalidInput("serve request: 'header_timeout' must be a number of seconds between 0 and 3600")
        if not 1 <= self.max_connections <= 1000000:
            raise InvalidInput("--max-connections must be between 1 and 1000000")
        if not 0 <= self.prefix_cache_mb <= self.PREFIX_CACHE_MB_MAX:
            raise InvalidInput(f"--prefix-cache-mb must be between 0 and {self.PREFIX_CACHE_MB_MAX}")
        if self.max_resident is not None and not 1 <= self.max_resident <= 4096:
            raise InvalidInput("--max-adapters must be between 1 and 4096")
        names = [(adapter.name, adapter.version) for adapter in self.served_models]
        if len(set(names)) != len(names):
            raise InvalidInput("serve request: 'served_models' names one model version twice")
        if self.served_models and self.adapter_path:
            raise InvalidInput("serve request: give 'adapter_path' or 'served_models', not both")
        for name in ("send_timeout", "body_timeout"):  # no option, as header_timeout
            if not 0 < getattr(self, name) <= 3600:
                raise InvalidInput(f"serve request: {name!r} must be a number of seconds between 0 and 3600")
