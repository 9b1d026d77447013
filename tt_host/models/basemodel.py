"""Hub base models outside a run: `tt models prefetch` (download into the Hugging Face cache, print the commit and
the spec line that pins it) and `tt models verify-base` (the cached snapshot of a commit is complete).

Prefetch runs `huggingface_hub.snapshot_download` in an engine environment that has it (the default engine's,
whose base model is a hub id, unless told another: the host never imports it), so HF_HUB_OFFLINE=1 and HF_HUB_CACHE / HF_HOME mean what they mean to a run's prefetch stage.
Prefetch-benchmarks downloads the datasets of a spec's named lm-eval tasks (`evaluation.benchmarks`) the same way,
in the spec's engine environment (tt_stagekit.benchmark_data), since the gate stages run offline.
Verify-base reads the cache only (tt_host.spec.hub_cache): the snapshot folder of the commit, a config.json, at
least one weights file, and every file present (the cache's symlinks point at blobs that exist).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Optional

from tt_host.engines import envs, isolation
from tt_host.errors import TTError
from tt_host.plugins import Plugins
from tt_host.spec.schema import DEFAULT_ENGINE
from tt_host.spec import hub_cache

FETCH = ("import json, sys\n"
         "from huggingface_hub import snapshot_download\n"
         "print(json.dumps({'path': snapshot_download(repo_id=sys.argv[1], revision=sys.argv[2])}))\n")
WEIGHTS = (".safetensors", ".bin", ".pt", ".gguf")


class BaseModelError(TTError, RuntimeError):
    """A base model that cannot be fetched or is incomplete (exit 1; a malformed id is exit 2)."""

    exit_code = 1


def _check_id(repo: str, revision: str) -> None:
    if not hub_cache.HUB_ID.match(repo) or "/" not in repo:
        raise BaseModelError(f"{repo!r} is not a hub id (org/name)", exit_code=2)
    if not revision or any(c.isspace() for c in revision):
        raise BaseModelError(f"{revision!r} is not a revision (a commit, branch or tag)", exit_code=2)


def pin_line(commit: str) -> str:
    return f'"base_model_revision": "{commit}",'


def _run_in(env: Any, arguments: list[str]) -> subprocess.CompletedProcess:
    """The engine environment's python started as every host helper is (tt_host.engines.isolation: -P, the
    host's import path left out), in the current folder so relative HF_HOME / HF_HUB_CACHE mean what they say."""
    return subprocess.run(isolation.python_command(env.python, arguments), capture_output=True, text=True,
                          env=isolation.python_env())


def prefetch(plugins: Plugins, repo: str, revision: str = "main", engine: str = DEFAULT_ENGINE) -> dict[str, Any]:
    """Download `repo` at `revision` into the cache (or find it there offline); its commit and the pin line."""
    _check_id(repo, revision)
    env = envs.ensure_env(plugins.engine(engine))
    proc = _run_in(env, ["-c", FETCH, repo, revision])
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BaseModelError(f"{repo}@{revision} could not be fetched: {last}; check the id and revision, the "
                             "network, or HF_HUB_OFFLINE and the cache it reads")
    path = Path(json.loads(proc.stdout.strip().splitlines()[-1])["path"])
    commit = path.name
    return {"repo": repo, "revision": revision, "commit": commit, "path": str(path), "pin": pin_line(commit),
            **verify_base(repo, commit)}


def verify_base(repo: str, revision: str) -> dict[str, Any]:
    """The cached snapshot of `repo` at `revision`: {commit, path, files, problems}."""
    _check_id(repo, revision)
    commit = hub_cache.cached_commit(repo, revision)
    if commit is None:
        return {"commit": None, "path": None, "files": 0, "problems": [
            f"{repo}@{revision} is not in the Hugging Face cache ({hub_cache.cache_dir()}); `tt models prefetch "
            f"{repo} --revision {revision}` downloads it"]}
    folder = hub_cache.snapshot(repo, commit)
    files = sorted(p for p in folder.rglob("*") if not p.is_dir())
    problems = [f"{p.relative_to(folder)}: missing (a link to a blob that is gone)" for p in files if not p.exists()]
    names = [p.name for p in files]
    if "config.json" not in names:
        problems.append("config.json: missing")
    if not any(name.endswith(WEIGHTS) for name in names):
        problems.append(f"no weights file ({', '.join(WEIGHTS)})")
    return {"commit": commit, "path": str(folder), "files": len(files), "problems": problems}


def spec_base(loaded) -> Optional[tuple[str, str]]:
    """(hub id, revision) of a loaded spec's base model, None when it is a local folder or the engine has none."""
    base = getattr(loaded.spec, "base_model", None)
    revision = getattr(loaded.spec, "base_model_revision", None)
    return (base, revision) if isinstance(base, str) and revision else None


def prefetch_benchmarks(plugins: Plugins, loaded: Any) -> dict[str, Any]:
    """Download the datasets of the spec's named lm-eval tasks into the Hugging Face datasets cache (the engine's
    environment runs lm-eval); local task files need nothing. {"fetched": [...], "local": [...]}."""
    benchmarks = loaded.spec.evaluation.benchmarks if loaded.spec.evaluation else None
    tasks = [task.task for task in benchmarks.tasks] if benchmarks else []
    local = [task for task in tasks if task.endswith((".yaml", ".yml"))]
    named = [task for task in tasks if task not in local]
    if named:
        env = envs.ensure_env(loaded.engine)
        proc = _run_in(env, ["-m", "tt_stagekit.benchmark_data", *named])
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise BaseModelError(f"the benchmark datasets could not be fetched: {last}")
    return {"fetched": named, "local": local}
