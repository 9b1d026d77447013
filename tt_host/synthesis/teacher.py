"""Who the teacher is: the URL and model name requests use, the key read from the environment, and the
identity a stage fingerprint hashes (never the key, nor the variable's value).

A `model_id` teacher is a model the registry holds (`tt models list`), served by `tt serve` at `base_url`
(default http://127.0.0.1:8000/v1); its identity includes the registry entry's manifest digest, so new
weights under the same id are a new teacher.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from tt_host.errors import TTError
from tt_host.models.registry import get_model
from tt_host.spec.synthesis import Teacher


class TeacherSetupError(TTError):
    """The teacher cannot be used as the spec names it (exit 2: fix the spec or the environment)."""

    exit_code = 2


@dataclass(frozen=True)
class ResolvedTeacher:
    url: str
    model: str
    api_key: Optional[str]  # read from the environment at run time; kept out of every file and digest
    identity: dict[str, Any]

    def __repr__(self) -> str:  # the key never shows in a traceback or a log line
        return f"ResolvedTeacher(url={self.url!r}, model={self.model!r})"


def teacher_identity(teacher: Teacher) -> dict[str, Any]:
    """What names the teacher in a fingerprint: its URL and model (and, for a registered model, its weights)."""
    identity: dict[str, Any] = {"url": teacher.url, "model": teacher.model_name}
    if teacher.model_id is not None:
        try:
            entry = get_model(teacher.model_id)
        except (OSError, ValueError):
            entry = None
        identity["model_id"] = teacher.model_id
        identity["manifest_sha256"] = (entry or {}).get("manifest_sha256")
    return identity


def resolve_teacher(teacher: Teacher, environ: Mapping[str, str] = os.environ) -> ResolvedTeacher:
    """The teacher ready to ask; refuses a missing key variable or an unregistered model_id."""
    key = None
    if teacher.api_key_env is not None:
        key = environ.get(teacher.api_key_env)
        if not key:
            raise TeacherSetupError(f"synthesis.teacher.api_key_env: the environment variable {teacher.api_key_env} "
                                    "is not set (or empty); export it with the teacher's key and run again")
    identity = teacher_identity(teacher)
    if teacher.model_id is not None and identity.get("manifest_sha256") is None:
        raise TeacherSetupError(f"synthesis.teacher.model_id: no registered model {teacher.model_id!r} "
                                "(`tt models list` shows them); serve one with `tt serve MODEL` and name it here")
    return ResolvedTeacher(teacher.url, teacher.model_name, key, identity)
