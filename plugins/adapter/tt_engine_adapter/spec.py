"""The adapter engine's spec model: `AdapterSpec` and its blocks (pydantic + tt_host only, never torch).

A spec with `"engine": "adapter"` is validated here: the base model (a local folder beside the spec or a
pinned hub id), the LoRA and training `hyperparameters`, optional prebuilt `datasets`, and the checks that
can be proven without a tokenizer (the instruction fits `max_seq_length`). Each setting is declared once,
in formats/settings.py; the models here are derived from it (`settings_model`) and add the host's rules.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import ValidationInfo, field_validator, model_validator

from tt_host.api import BehaviorSpec, DistributedSettings, compile_validated_so_far, resolve_path, settings_model

from tt_engine_adapter import lengthcheck, memory_plan, sharding_spec
from tt_engine_adapter.formats import fingerprint, pairs as pair_files, rows, tuning
from tt_engine_adapter.formats.settings import (AdapterSettings, AdapterSpecFields, DatasetSource, DatasetSplits,
                                                PreferenceSettings, ReinforcementSettings)
from tt_engine_adapter.preference_spec import DERIVED, Preference
from tt_engine_adapter.reinforcement_spec import Reinforcement

HEX40 = memory_plan.HEX40
# A branch or tag name as the hub takes it (git's ref rules, simplified): `main`, `v1.0`, `refs/pr/3`.
REF_NAME = re.compile(r"^(?!.*\.\.)(?!.*//)(?!.*\.lock$)[A-Za-z0-9][A-Za-z0-9._/-]{0,254}(?<![/.])\Z")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?\Z")
MODULE_NAME = re.compile(r"^[A-Za-z0-9_.]+\Z")


class Hyperparameters(settings_model(AdapterSettings, base=DistributedSettings)):
    """LoRA and training knobs, and the torchrun settings of the train stage (`DistributedSettings`: its
    nproc_per_node, nnodes, node_rank and rdzv_endpoint). Strict types: "3" is not an int here."""

    spec_path: ClassVar[str] = "hyperparameters"  # the settings: formats/settings.py's AdapterSettings

    @model_validator(mode="after")
    def _early_stopping(self) -> "Hyperparameters":
        if self.early_stopping_patience is not None and self.eval_interval_steps is None:
            raise ValueError("hyperparameters.early_stopping_patience needs hyperparameters.eval_interval_steps "
                             "(how often the validation loss is measured)")
        return self

    @model_validator(mode="after")
    def _world(self) -> "Hyperparameters":
        world = self.world_size
        if world > 1 and self.batch_size % world:
            raise ValueError(
                f"hyperparameters.batch_size ({self.batch_size}) rows per micro-batch cannot be split evenly across "
                f"{world} processes (hyperparameters.nproc_per_node {self.nproc_per_node} × hyperparameters.nnodes "
                f"{self.nnodes}): make hyperparameters.batch_size a multiple of {world}"
            )
        return self

    @field_validator("lora_target_modules")
    @classmethod
    def _modules(cls, value: Union[str, list[str]]) -> Union[str, list[str]]:
        if isinstance(value, list):
            if not value:
                raise ValueError('give at least one module name, or "all-linear"')
            for name in value:
                if not MODULE_NAME.match(name):
                    raise ValueError(f"{name!r} is not a module name")
            if len(set(value)) != len(value):
                raise ValueError("module names repeat")
        return value


def _local_source(value: str, info: ValidationInfo, where: str) -> str:
    """A local dataset beside the spec: a JSONL file (checked here, row by row), a parquet file or a `datasets`
    save_to_disk folder (their rows are checked by the prepare stage, which can read them)."""
    path = resolve_path(value, info)
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            raise ValueError(f"{path} is a DatasetDict folder; give one split's folder (e.g. {path / 'train'})")
        if not (path / "state.json").is_file():
            raise ValueError(f"{path} is a folder but not a `datasets` save_to_disk folder (no state.json)")
        return str(path)
    if path.suffix == ".parquet":
        if not path.is_file():
            raise ValueError(f"{path}: file not found")
        return str(path)
    try:
        rows.read_chat_jsonl(path, where, None)
    except rows.RowError as exc:
        raise ValueError(str(exc)) from None
    return str(path)


class Source(settings_model(DatasetSource)):
    """One dataset source: a local `path` or a `hub` dataset at a pinned `revision`, with a mixing `weight`."""

    @field_validator("path")
    @classmethod
    def _path(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        return None if value is None else _local_source(value, info, "train")

    @model_validator(mode="after")
    def _one(self) -> "Source":
        if (self.path is None) == (self.hub is None):
            raise ValueError("give either path or hub")
        if self.hub is not None:
            if not HUB_ID.match(self.hub) or "/" not in self.hub:
                raise ValueError(f"hub: {self.hub!r} is not a dataset id org/name")
            if not self.revision or not (HEX40.match(self.revision) or REF_NAME.match(self.revision)):
                raise ValueError("revision: a hub dataset needs a pinned revision (40-hex commit, branch or tag)")
        elif self.revision is not None:
            raise ValueError("revision applies only to a hub dataset")
        return self


class Datasets(settings_model(DatasetSplits, models={DatasetSource: Source})):
    """Optional prebuilt datasets: a path beside the spec (JSONL, parquet, save_to_disk folder) or sources;
    `train` may mix several sources with weights."""

    @field_validator("train", "validation", "test")
    @classmethod
    def _exists(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            return _local_source(value, info, info.field_name)
        if isinstance(value, list) and not value:
            raise ValueError("give at least one source")
        return value

    def sources(self, split: str) -> list[Source]:
        value = getattr(self, split)
        if value is None:
            return []
        if isinstance(value, str):
            return [Source(path=value)]
        return value if isinstance(value, list) else [value]

    def paths(self) -> dict[str, Path]:
        """The JSONL files among the sources, one per split (what the host checks row by row)."""
        out = {}
        for split in rows.SPLITS:
            for source in self.sources(split):
                if source.path and Path(source.path).is_file() and Path(source.path).suffix != ".parquet":
                    out.setdefault(split, Path(source.path))
        return out

    def fingerprint(self) -> dict[str, Any]:
        def one(source: Source) -> dict[str, Any]:
            if source.hub:
                return {"hub": source.hub, "revision": source.revision, "split": source.split, "weight": source.weight}
            path = Path(source.path)
            digest = fingerprint.folder_fingerprint(path) if path.is_dir() else fingerprint.sha256_file(path)
            return {"path": str(path), "sha256": digest, "weight": source.weight}

        return {split: [one(s) for s in self.sources(split)] for split in rows.SPLITS if self.sources(split)}


class AdapterSpec(settings_model(AdapterSpecFields, base=BehaviorSpec, models={
        AdapterSettings: Hyperparameters, DatasetSplits: Datasets, PreferenceSettings: Preference,
        ReinforcementSettings: Reinforcement})):
    """A behavior spec for the adapter engine."""

    engine: Literal["adapter"] = "adapter"

    @field_validator("base_model")
    @classmethod
    def _base_model(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        local = resolve_path(value, info)
        looks_local = value.startswith((".", "/", "~")) or "\\" in value or value.count("/") > 1
        if local is not None and local.exists():
            if not local.is_dir():
                raise ValueError(f"{local} is not a folder")
            if not (local / "config.json").is_file():
                raise ValueError(f"local model folder {local} has no config.json")
            return str(local)
        if looks_local or not HUB_ID.match(value):
            raise ValueError(f"local model folder {local} does not exist")
        return value

    @field_validator("base_model_revision")
    @classmethod
    def _revision(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        base = info.data.get("base_model")
        if base is None:
            return value
        if Path(base).is_absolute():
            if value is not None:
                raise ValueError("applies only to a hub id; base_model is a local folder")
            return None
        if value is None:
            raise ValueError(f"required for hub id {base!r}: a 40-hex commit, a branch such as \"main\" or a tag "
                             "(no local folder of that name exists)")
        value = value.strip()
        if not (HEX40.match(value) or REF_NAME.match(value)):
            raise ValueError(f"{value!r} is neither a 40-hex commit id nor a branch or tag name")
        return value

    @field_validator("hyperparameters")
    @classmethod
    def _instruction_fits(cls, value: Hyperparameters, info: ValidationInfo) -> Hyperparameters:
        """Refuse what can be proven too long without a tokenizer (lengthcheck); prefetch checks exactly."""
        if info.data.get("base_model") is None:
            return value
        system = compile_validated_so_far(info)
        answers = [example.output for example in info.data.get("examples", [])]
        error = lengthcheck.length_error(info.data["base_model"], system, answers, value.max_seq_length)
        if error:
            raise ValueError(error)
        return value

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, value: Optional[Datasets], info: ValidationInfo) -> Optional[Datasets]:
        if value is None:
            return value
        system = compile_validated_so_far(info)
        inputs = [example.input for example in info.data.get("examples", [])]
        try:
            rows.check_datasets(value.paths(), system, inputs)
        except rows.RowError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("preference")
    @classmethod
    def _pairs_file(cls, value: Optional[Preference], info: ValidationInfo) -> Optional[Preference]:
        """A pairs file is checked against the compiled system message and leak-checked against the examples."""
        if value is None or value.pairs == DERIVED:
            return value
        system = compile_validated_so_far(info)
        try:
            pair_files.read_pairs(value.pairs, system, [e.input for e in info.data.get("examples", [])])
        except rows.RowError as exc:
            raise ValueError(f"pairs: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_tuning_block(self) -> "AdapterSpec":
        error = tuning.both_given(self)
        if error:
            raise ValueError(error)
        return self

    @model_validator(mode="after")
    def _answer_budget(self) -> "AdapterSpec":
        """A sampled answer's budget leaves room for the prompt in max_seq_length (the stages fit the prompt into
        max_seq_length - max_new_tokens: none left would fail after the SFT stage had trained)."""
        limit = self.hyperparameters.max_seq_length
        budgets = []
        if self.reinforcement is not None:
            budgets.append(("reinforcement.max_new_tokens", self.reinforcement.max_new_tokens))
        if self.preference is not None and self.preference.pairs == DERIVED:
            own = self.preference.max_new_tokens
            budgets.append(("preference.max_new_tokens" if own else "hyperparameters.max_new_tokens (the derived "
                            "pairs' sample length)", own or self.hyperparameters.max_new_tokens))
        for field, tokens in budgets:
            if tokens >= limit:
                raise ValueError(f"{field}: {tokens} tokens leave no room for the prompt in "
                                 f"hyperparameters.max_seq_length ({limit}); lower it below {limit} or raise "
                                 "max_seq_length")
        return self

    @model_validator(mode="after")
    def _cuda_only(self) -> "AdapterSpec":
        """Options that exist only on CUDA are refused when the spec names another device."""
        if self.device in ("cpu", "mps"):
            hp = self.hyperparameters
            if hp.load_in_4bit:
                raise ValueError(f"hyperparameters.load_in_4bit: 4-bit QLoRA (bitsandbytes) needs a CUDA device and "
                                 f"device is {self.device!r}; set it to false, or use device \"cuda\"")
            if hp.precision in ("bf16", "fp16"):
                raise ValueError(f"hyperparameters.precision: {hp.precision} training needs a CUDA device and device "
                                 f"is {self.device!r}; use \"auto\" or \"fp32\"")
        return self

    @model_validator(mode="after")
    def _sharding(self) -> "AdapterSpec":
        error = sharding_spec.sharding_error(self)
        if error:
            raise ValueError(error)
        return self

    @model_validator(mode="after")
    def _validation_rows(self) -> "AdapterSpec":
        if self.hyperparameters.eval_interval_steps and not (self.datasets and self.datasets.validation):
            raise ValueError("hyperparameters.eval_interval_steps: evaluation during training needs validation rows; "
                             "give datasets.validation, or unset it")
        return self

    @model_validator(mode="after")
    def _enough_rows(self) -> "AdapterSpec":
        if len(self.examples) < 2 and not (self.datasets and self.datasets.train):
            raise ValueError("examples: at least 2 examples are needed (or a prebuilt datasets.train)")
        return self

    @model_validator(mode="after")
    def _fits(self) -> "AdapterSpec":
        """A plan whose training peak exceeds the whole memory of this machine's devices is refused (memory_plan):
        last, so that a spec's other mistakes are named first."""
        folder = memory_plan.model_folder(self.base_model, self.base_model_revision)
        error = memory_plan.plan_error(self.hyperparameters, self.device, folder)
        if error:
            raise ValueError(error)
        return self
