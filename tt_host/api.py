"""The plugin API of tt: the one module of the host an engine or observer plugin imports.

Everything here is public and kept stable within a major `HOST_API_VERSION`; the rest of `tt_host` is the
host's own and may change in any release (`tests/architecture/test_front_door.py` fails when a shipped plugin
imports anything else of it). The stage side of the protocol, which runs in the engine's environment, is
`tt_stagekit`, never this module. `SECTIONS` groups the names as docs/plugins.md lists them
(`scripts/plugin-api-docs` writes that list from this module).
"""

from __future__ import annotations

from tt_host import HOST_API_VERSION
from tt_host.checks.preflight import torch_device_check, world_size_check
from tt_host.engine import (SERVE_EXPORT, SERVE_HF, SERVE_ON_BASE, SERVE_OWN, Check, DiskNeed, Engine, Export,
                            ModelKind, PipelineVocabulary, Serve, Stage)
from tt_host.errors import TTError
from tt_host.hookspecs import hookimpl
from tt_host.models.references import ModelRefError, ResolvedModel, from_folder, resolve_registered
from tt_host.runs.runinfo import RunInfo
from tt_host.spec.compiler import compile_system_message, compile_validated_so_far
from tt_host.spec.schema import BehaviorSpec, DistributedSettings, resolve_path, symlink_in
from tt_host.spec.settings import settings_model
from tt_host.spec.strict import StrictModel, Text
from tt_stagekit.sides import BASELINE_SIDE, CANDIDATE_SIDE, EVALUATING_SIDES, SFT_SIDE

SECTIONS: dict[str, tuple[str, ...]] = {
    "Hooks": ("hookimpl", "HOST_API_VERSION", "RunInfo"),
    "Records an engine yields": ("Engine", "Stage", "Check", "DiskNeed", "ModelKind", "Export", "Serve",
                                 "PipelineVocabulary", "SERVE_EXPORT", "SERVE_HF", "SERVE_ON_BASE", "SERVE_OWN"),
    "Spec models an engine extends": ("BehaviorSpec", "DistributedSettings", "StrictModel", "Text", "settings_model",
                                      "resolve_path", "symlink_in", "compile_system_message",
                                      "compile_validated_so_far"),
    "Evaluating sides (a stage's `evaluates`)": ("BASELINE_SIDE", "SFT_SIDE", "CANDIDATE_SIDE", "EVALUATING_SIDES"),
    "Checks an engine's doctor may return": ("torch_device_check", "world_size_check"),
    "Registered models": ("from_folder", "resolve_registered", "ResolvedModel", "ModelRefError"),
    "Errors": ("TTError",),
}

# The names whose objects carry no docstring of their own (a pluggy marker, a typing alias).
DESCRIBED: dict[str, str] = {
    "hookimpl": "The marker of a hook implementation: `@hookimpl def tt_engines(): ...` (pluggy, project `tt`).",
    "Text": "A spec string that must not be blank after trimming (refused naming its field).",
    "BASELINE_SIDE": "`'baseline'`: the side a stage evaluating the base model answers for.",
    "SFT_SIDE": "`'sft'`: the SFT model's side, evaluated when a tuning stage (preference, reinforcement) follows SFT.",
    "CANDIDATE_SIDE": "`'candidate'`: the final, tuned model's side.",
    "EVALUATING_SIDES": "The three sides in report order, declared once in `tt_stagekit.sides` (an engine's runtime "
                        "code reads them there).",
}

# Listed, not computed, so that tools see what is public; the layout test checks it against SECTIONS.
__all__ = ["hookimpl", "HOST_API_VERSION", "RunInfo", "Engine", "Stage", "Check", "DiskNeed", "ModelKind", "Export",
           "Serve", "PipelineVocabulary", "SERVE_EXPORT", "SERVE_HF", "SERVE_ON_BASE", "SERVE_OWN", "BehaviorSpec",
           "DistributedSettings", "StrictModel", "Text", "settings_model", "resolve_path", "symlink_in", "compile_system_message",
           "compile_validated_so_far", "BASELINE_SIDE", "SFT_SIDE", "CANDIDATE_SIDE", "EVALUATING_SIDES",
           "torch_device_check", "world_size_check", "from_folder", "resolve_registered",
           "ResolvedModel", "ModelRefError", "TTError"]
