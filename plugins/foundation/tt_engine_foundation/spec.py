"""The foundation engine's spec: the neutral BehaviorSpec plus a strict `foundation` block.

Light: pydantic, tt_host and the stdlib only (never torch). Each setting is declared once, in
formats/settings.py; the models here are derived from it (`settings_model`) and add the host's rules.
Paths resolve
beside the spec (validation context `spec_dir`); corpus problems that can be
seen without reading the data are refused here, so `tt validate` reports them
with their dotted location before anything is created on disk.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import ClassVar, Literal, Optional

from pydantic import ValidationInfo, field_validator, model_validator

from tt_host.api import BehaviorSpec, DistributedSettings, resolve_path, settings_model, symlink_in
from tt_stagekit.chatrows import read_chat_file
from tt_stagekit.promptfit import length_message, words
from tt_stagekit.userinput import loads, os_reason, special_kind

from tt_engine_foundation.formats import backup
from tt_engine_foundation.formats.settings import FoundationSettings, FoundationSpecFields
from tt_engine_foundation.formats.shards import SHARD_SUFFIXES, is_shard

RUNS_FOLDER = (".tuned-tensor", "runs")  # a run's default parent beside the spec (tt_host.runlayout's)
ROW_SPECIAL_TOKENS = 7  # BOS, system/user/assistant start and end markers (the answer's end included)


def _check_corpus_path(path: Path, what: str, info: ValidationInfo) -> None:
    """Checks that read at most the start of each shard: exists, no link anywhere in the path or inside the
    folder, regular files only (a FIFO or device would hang the reader), supported type, some text."""
    link = symlink_in(path, info)
    if link is not None:
        where = "" if link == path else f" ({link} is one)"
        raise ValueError(f"{path}: the path goes through a symbolic link{where}; symbolic links are refused, "
                         f"point at the real {what}")
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise ValueError(f"{path}: {'does not exist' if exc.errno == errno.ENOENT else os_reason(exc)}") from None
    if stat.S_ISREG(mode):
        if not is_shard(path):
            raise ValueError(f"{path} is not a {', '.join(SHARD_SUFFIXES)} file")
        if not _has_text(path):
            raise ValueError(f"{path} holds no text (the {what} is empty)")
        return
    if not stat.S_ISDIR(mode):
        raise ValueError(f"{path} is {special_kind(mode)}, neither a file nor a folder")
    shards: list[Path] = []
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in list(dirs) + list(files):
            full = Path(root) / name
            if name.startswith("."):
                continue
            if full.is_symlink():
                raise ValueError(f"{full} is a symbolic link inside the {what} folder; symbolic links are refused")
            if is_shard(full):
                kind = special_kind(full.lstat().st_mode)
                if kind is not None and kind != "a folder":
                    raise ValueError(f"{full} is {kind}, not a regular file; remove it from the {what} folder")
                if kind is None:
                    shards.append(full)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
    if not shards:
        raise ValueError(f"{path} holds no shards ({', '.join(SHARD_SUFFIXES)} files, searched recursively)")
    if not any(_has_text(shard) for shard in shards):
        raise ValueError(f"{path}: every shard is empty (the {what} holds no text)")


def _has_text(shard: Path, chunk: int = 1 << 16) -> bool:
    """Whether a shard holds a document, reading only until it finds one: .txt any non-whitespace, .jsonl a row
    whose "text" is non-empty (a malformed row counts: the reader names its file:line), parquet any bytes."""
    suffix = shard.suffix.lower()
    if suffix == ".parquet":
        return shard.stat().st_size > 0
    with open(shard, "rb") as handle:
        if suffix == ".jsonl":
            for line in handle:
                if not line.strip():
                    continue
                try:
                    row = loads(line)
                except ValueError:
                    return True
                if not isinstance(row, dict) or row.get("text") != "":
                    return True
            return False
        while block := handle.read(chunk):
            if block.strip():
                return True
    return False


FOUNDATION_KINDS = ("foundation-base", "foundation-sft", "foundation-rl")


def resolve_init_model(value: str, info: ValidationInfo) -> str:
    """A registered model id, a foundation model folder or a run directory (its pretrained base), as the
    absolute path of a verified foundation model folder."""
    from tt_host.api import ModelRefError, from_folder, resolve_registered

    text = value.strip()
    local = resolve_path(text, info)
    if local is not None and (local / "run.json").is_file():
        local = local / "pretrain" / "model"
        if not local.is_dir():
            raise ValueError(f"run directory {local.parent.parent} has no pretrained model (pretrain/model)")
    try:
        if local is not None and local.exists():
            resolved = from_folder(local)
        else:
            resolved = resolve_registered(text)
    except ModelRefError as exc:
        raise ValueError(str(exc)) from None
    if resolved.kind not in FOUNDATION_KINDS:  # the kinds name the engine; `form` says how a model is served
        raise ValueError(f"{resolved.path} is a {resolved.kind!r} model, not a foundation model folder "
                         "(pretrain/model, sft/model or rl/model of a foundation run, or its registered id)")
    return str(resolved.path)


class FoundationConfig(settings_model(FoundationSettings, base=DistributedSettings)):
    """Every knob of the foundation engine (docs/foundation.md), with bounds and defaults; the torchrun settings
    of pretraining and SFT (nproc_per_node, nnodes, node_rank, rdzv_endpoint) come from `DistributedSettings`."""

    spec_path: ClassVar[str] = "foundation"  # the settings: formats/settings.py's FoundationSettings

    @field_validator("corpus_path", "validation_path", "checkpoint_backup_dir", mode="before")
    @classmethod
    def _resolve(cls, value, info: ValidationInfo):
        if value is None:
            return None
        if not isinstance(value, (str, Path)) or not str(value).strip():
            raise ValueError("must be a non-empty path string")
        return resolve_path(value, info)

    @field_validator("corpus_path")
    @classmethod
    def _corpus(cls, value: Optional[Path], info: ValidationInfo) -> Optional[Path]:
        if value is not None:
            _check_corpus_path(value, "corpus", info)
        return value

    @field_validator("validation_path")
    @classmethod
    def _validation(cls, value: Optional[Path], info: ValidationInfo) -> Optional[Path]:
        if value is None:
            return None
        _check_corpus_path(value, "validation", info)
        corpus = info.data.get("corpus_path")
        if corpus is not None:
            a, b = os.path.realpath(value), os.path.realpath(corpus)
            if a == b:
                raise ValueError(f"{value} is the training corpus itself; validation must be held-out text")
            if a.startswith(b.rstrip(os.sep) + os.sep):
                raise ValueError(f"{value} lies inside the training corpus folder {corpus}, so it is not held out")
            if b.startswith(a.rstrip(os.sep) + os.sep):
                raise ValueError(f"the training corpus {corpus} lies inside {value}, so validation is not held out")
        return value

    @field_validator("sft_datasets", mode="before")
    @classmethod
    def _sft_datasets(cls, value, info: ValidationInfo):
        if not isinstance(value, list):
            return value
        paths = []
        for item in value:
            if not isinstance(item, str) or not item.strip():
                raise ValueError("each entry must be a non-empty path string")
            path = resolve_path(item, info)
            try:
                read_chat_file(path, ValueError)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
            paths.append(path)
        return paths

    @field_validator("checkpoint_backup_dir")
    @classmethod
    def _backup(cls, value: Optional[Path], info: ValidationInfo) -> Optional[Path]:
        """A link or a file is refused; so is a folder inside the runs this spec's default run folders live in or
        $TT_HOME/runs (formats/backup.py; the run folder itself is checked at the pretrain stage's start)."""
        if value is not None:
            if value.is_symlink():
                raise ValueError(f"{value} is a symbolic link; symbolic links are refused")
            if value.exists() and not value.is_dir():
                raise ValueError(f"{value} exists and is not a folder")
            default_runs = resolve_path(os.path.join(*RUNS_FOLDER), info)
            refusal = backup.misplaced(value, (("the spec's runs folder", default_runs),
                                               ("$TT_HOME's runs folder", backup.tt_home_runs())))
            if refusal:
                raise ValueError(refusal)
        return value

    @field_validator("document_start_share")
    @classmethod
    def _start_share(cls, value: float, info: ValidationInfo) -> float:
        if value > 0 and info.data.get("packing") == "stream":
            raise ValueError("applies to packing bos_aligned only (stream windows do not start at documents); "
                             "remove it or set packing to bos_aligned")
        return value

    @field_validator("finetune_corpus_rows")
    @classmethod
    def _replay_needs_a_token_cache(cls, value: int, info: ValidationInfo) -> int:
        if value > 0 and info.data.get("init_model") is not None:
            raise ValueError("replays this run's pretraining token cache, and with foundation.init_model the run has "
                             "none (nothing is pretrained here); set it to 0, or pretrain in this run")
        return value

    @field_validator("init_model")
    @classmethod
    def _init_model(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        if value is None:
            return None
        if not value.strip():
            raise ValueError("must be a registered model id or a model folder, not blank")
        return resolve_init_model(value, info)

    @model_validator(mode="after")
    def _init_alone(self) -> "FoundationConfig":
        if self.init_model is not None:
            for name in ("corpus_path", "validation_path"):
                if getattr(self, name) is not None:
                    raise ValueError(f"foundation.{name} is not used when foundation.init_model is set (SFT starts "
                                     "from that model: nothing is pretrained or measured here); remove one of them")
        return self

    @model_validator(mode="after")
    def _world(self) -> "FoundationConfig":
        world = self.world_size
        if world > 1 and self.device == "mps":
            raise ValueError("foundation.nproc_per_node × nnodes > 1 needs device cpu (gloo) or cuda (NCCL), not mps")
        if world > 1 and self.batch_size % world and self.gradient_accumulation_steps % world:
            raise ValueError(
                f"foundation.batch_size ({self.batch_size}) × foundation.gradient_accumulation_steps "
                f"({self.gradient_accumulation_steps}) sequences per optimizer step cannot be split evenly across "
                f"{world} processes (foundation.nproc_per_node {self.nproc_per_node} × foundation.nnodes {self.nnodes}): "
                f"make foundation.batch_size or foundation.gradient_accumulation_steps a multiple of {world}"
            )
        return self

    @field_validator("warmup_steps")
    @classmethod
    def _schedule(cls, value: int, info: ValidationInfo) -> int:
        steps = info.data.get("pretrain_steps")
        if steps is not None and value >= steps:
            raise ValueError(f"warmup_steps ({value}) must be smaller than pretrain_steps ({steps})")
        return value


class FoundationSpec(settings_model(FoundationSpecFields, base=BehaviorSpec,
                                    models={FoundationSettings: FoundationConfig})):
    """A behavior spec trained from scratch by the foundation engine."""

    engine: Literal["foundation"] = "foundation"

    @field_validator("foundation")
    @classmethod
    def _instruction_fits(cls, value: FoundationConfig, info: ValidationInfo) -> FoundationConfig:
        """Refuse an instruction + longest answer that provably cannot fit foundation.sequence_length.

        The tokenizer is trained at run time, so this is a lower bound: the
        GPT-4 style split never joins whitespace-separated words, so each is at
        least one token, plus the row's 7 special tokens (with an empty user
        message). The tokenizer stage checks the exact length (exit 2).
        """
        from tt_host.api import compile_validated_so_far

        system = compile_validated_so_far(info)
        answers = [example.output for example in info.data.get("examples", [])]
        needed = ROW_SPECIAL_TOKENS + words(system) + max((words(a) for a in answers), default=0)
        if needed > value.sequence_length + 1:  # a row of n ids trains n - 1 positions
            raise ValueError(length_message("foundation.sequence_length", needed - 1, value.sequence_length,
                                            exact=False))
        return value

    @model_validator(mode="after")
    def _sft_system(self) -> "FoundationSpec":
        """A dataset row's leading system message must be the compiled one (it leads every row anyway), and no
        row may share a prompt with an example: the host holds some examples out, and SFT would train on it."""
        if self.foundation.sft_datasets:
            from tt_host.api import compile_system_message
            from tt_stagekit.chatrows import example_keys, overlapping_example

            system = compile_system_message(self)
            examples = example_keys(e.input for e in self.examples)
            for path in self.foundation.sft_datasets:
                try:
                    rows = read_chat_file(path, ValueError, system_message=system)
                except ValueError as exc:
                    raise ValueError(f"foundation.sft_datasets: {exc}") from None
                for row in rows:
                    if found := overlapping_example(row["messages"], examples):
                        raise ValueError(f"foundation.sft_datasets: {row['where']}: {found} (after normalization; "
                                         "the host holds examples out for evaluation, so SFT would train on a "
                                         "held-out prompt); remove the row or the example")
        return self

    @model_validator(mode="after")
    def _rl_reachable(self) -> "FoundationSpec":
        if self.foundation.rl_steps > 0 and not any(e.output.strip() for e in self.examples):
            raise ValueError("foundation.rl_steps > 0 but no example has a non-blank output, so every reward would be zero")
        return self
