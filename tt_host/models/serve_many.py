"""`tt serve A B ...` / `--models-from FILE`: several registered models served on one base, in one server (host side).

Each MODEL is a registered model (its id, unique prefix, `ID@n` or `active`; never a folder: a version is what
pins the weights), resolved and verified as `tt serve MODEL` does (tt_host.models.references). All must be
models of a kind served on its base (`SERVE_ON_BASE`) (a model served on its own is served alone, one per server) trained on the
same base: the same base name, revision and content fingerprint as recorded in their manifests (verified
files); any other is refused (exit 2) naming it and the base it was trained on. The server gets each as a
`ServedModel` pinned by the sha256 of its artifact-manifest.json, and answers its admin endpoint by
asking this process (`answer`), which resolves among registered models only, with the same checks: a client's
name is a name (never a path, never looked up on the file system) and a prefix is looked up on the server's base
only, so an answer names only what the client named.
"""

from __future__ import annotations

from pathlib import Path
import re
from typing import Any, Optional

from tt_host.engine import SERVE_ON_BASE
from tt_host.errors import TTError
from tt_host import ids
from tt_host.models import activation, prefixes, registry
from tt_host.models.references import ModelRefError, ResolvedModel, registered_id, resolve_active, resolve_registered
from tt_host.terminal import clean
from tt_stagekit.contract import ServedModel
from tt_stagekit.userinput import InputFileError, read_regular

MAX_MODELS = 1024
MAX_LINE = 1000
CLIENT_NAME = re.compile(ids.MODEL_ID.pattern + r"(?:@[0-9]{1,9})?")  # what the admin endpoint takes


class ManyError(TTError):
    """The set of models cannot be served together (exit 2)."""

    exit_code = 2


def read_models_file(path: Path) -> list[tuple[str, str]]:
    """(reference, "FILE:line") of each model listed in `path`: one id per line; blank lines and lines starting
    with `#` are skipped. Read as data: exit 2 naming FILE:line for a line that is not one plain name."""
    try:  # a regular file only, capped: a FIFO, /dev/zero or a link to it is refused, never waited on or filled
        data = read_regular(path, MAX_MODELS * (MAX_LINE + 1))
    except InputFileError as exc:
        raise ManyError(f"--models-from {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManyError(f"--models-from {path}: not UTF-8 text (byte {exc.start})") from None
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        where = f"{path}:{number}"
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if len(name) > MAX_LINE or any(c.isspace() or not c.isprintable() for c in name):
            raise ManyError(f"{where}: give one model id per line (found {clean(name[:80])!r})")
        if name.startswith(("/", ".", "~")):
            raise ManyError(f"{where}: {clean(name[:80])!r} is a path; a multi-model server takes registered "
                            "model ids only (`tt models list`)")
        found.append((name, where))
        if len(found) > MAX_MODELS:
            raise ManyError(f"{where}: more than {MAX_MODELS} models")
    if not found:
        raise ManyError(f"--models-from {path}: no model id in it (one per line)")
    return found


def base_key(model: ResolvedModel) -> tuple:
    """What identifies the base a model was trained on: its manifest's base name, revision and fingerprint."""
    base = model.manifest.get("base_model") if isinstance(model.manifest.get("base_model"), dict) else {}
    return (base.get("name"), base.get("revision"), base.get("fingerprint"))


def _describe(key: tuple) -> str:
    name, revision, fingerprint = key
    return f"{clean(str(name))}" + (f" at {revision}" if revision else "") + \
        (f" (fingerprint {str(fingerprint)[:12]})" if fingerprint else "")


def served_model(reference: str) -> tuple[ResolvedModel, ServedModel]:
    """A registered model served on a base (id, unique prefix, `ID@n` or `active`), verified, as the server is handed it."""
    if Path(reference).expanduser().exists() and reference not in ("active",):
        raise ModelRefError(f"{reference!r} is a folder; a multi-model server takes registered model ids only "
                            "(`tt models list`), so every model it serves is a pinned version")
    return _registered(reference)


def _registered(reference: str) -> tuple[ResolvedModel, ServedModel]:
    """served_model without its look at the file system (the admin endpoint's names are names, never paths)."""
    if reference == "active":  # the active version (not its id's latest), verified against what was activated
        state = activation.current()
        if state["model"] is None:
            raise ModelRefError("`active`: no model is active (`tt models active`); give a model id")
        resolve_active()
        reference = activation.active_reference(state)
    model = resolve_registered(reference)
    entry = registry.get_version(registered_id(reference))
    if entry is None or model.form != SERVE_ON_BASE:
        raise ManyError(f"{model.model_id} is a {model.kind} model, not one served on its base: a model of "
                        "another kind is served alone (`tt serve MODEL`), one per server")
    return model, ServedModel(name=model.model_id, path=str(model.path), manifest_sha256=entry["manifest_sha256"],
                                version=entry.get("version"), system_message=model.system_message)


def resolve_many(references: list[tuple[str, str]]) -> tuple[list[ResolvedModel], list[ServedModel]]:
    """Each (reference, where) resolved and checked to share one base; ManyError (exit 2) naming the ones that
    do not, or a version given twice."""
    models, versions, seen = [], [], {}
    for reference, where in references:
        try:
            model, served = served_model(reference)
        except (ModelRefError, ManyError) as exc:
            raise type(exc)(f"{where}: {exc}", exit_code=exc.exit_code) from None
        key = (served.name, served.version)
        if key in seen:
            raise ManyError(f"{where}: {served.name}@{served.version} is already given ({seen[key]})")
        seen[key] = where
        models.append(model)
        versions.append(served)
    check_one_base(models, [where for _, where in references])
    return models, versions


def check_one_base(models: list[ResolvedModel], wheres: list[str]) -> None:
    """ManyError (exit 2) naming every model whose base (name, revision, fingerprint) is not the first's."""
    first = base_key(models[0])
    others = [(m, w) for m, w in zip(models, wheres) if base_key(m) != first]
    if others:
        named = "; ".join(f"{clean(m.model_id)} ({w}) is trained on {_describe(base_key(m))}" for m, w in others)
        raise ManyError(f"one server serves models of one base: {clean(models[0].model_id)} is trained on "
                        f"{_describe(first)}, but {named}; serve those with another `tt serve`")


def answer(event: dict[str, Any], base: tuple) -> dict[str, Any]:
    """The host's answer to the server's `model_request` event (its admin endpoint): the registered
    model it names, verified and on the served base, or an error with its HTTP status.

    The client's name is a name: a model id, or a unique prefix of one, optionally `@n` (`CLIENT_NAME`);
    anything else (a path, `~`, a space) is refused alike, before any look at the file system, so an answer
    never tells which host paths exist. A prefix is looked up among the models on this server's base only, and
    an answer names no registered id but the one the client gave or the ids its prefix begins on this base."""
    ref, reference = event.get("ref"), event.get("model")
    if not isinstance(reference, str) or not CLIENT_NAME.fullmatch(reference):
        return {"ref": ref, "error": "give a registered model id, a unique prefix of one or ID@n (a name, never a "
                                     "path; `tt models list` on the host)", "status": 400}
    try:
        named = _on_base(reference, base)
    except TTError as exc:  # an ambiguous prefix (the ids it begins on this base), a bad version
        return {"ref": ref, "error": clean(str(exc)), "status": 400}
    if named is None:
        return {"ref": ref, "error": f"no registered model {reference!r} on this server's base; see `tt models "
                                     "list` on the host", "status": 404}
    try:
        model, served = _registered(named)
    except ModelRefError as exc:
        return {"ref": ref, "error": clean(str(exc)), "status": 404 if exc.exit_code == 2 else 422}
    except TTError as exc:
        return {"ref": ref, "error": clean(str(exc)), "status": 409}
    if base_key(model) != base:
        return {"ref": ref, "error": f"{clean(model.model_id)} is trained on {_describe(base_key(model))}, not on "
                                     f"this server's base {_describe(base)}", "status": 409}
    return {"ref": ref, "model": {"name": served.name, "path": served.path, "version": served.version,
                                  "manifest_sha256": served.manifest_sha256,
                                  "system_message": served.system_message}}


def _on_base(reference: str, base: tuple) -> Optional[str]:
    """The registered id (with its `@n`) a client's name gives: the id itself whatever its base (the client
    named it), else the one id on `base` it begins (AmbiguousPrefix lists those only); None when none."""
    name, at, number = reference.partition("@")
    if registry.get_model(name) is not None:
        return reference
    on_base = [entry["id"] for entry in registry.list_models(problems=[]) if _entry_base(entry) == base]
    picked = prefixes.pick(name, on_base, "model")
    return None if picked is None else picked + at + number


def _entry_base(entry: dict[str, Any]) -> tuple:
    """base_key of a registry entry (its manifest's base_model, recorded at registration)."""
    base = entry.get("base_model") if isinstance(entry.get("base_model"), dict) else {}
    return (base.get("name"), base.get("revision"), base.get("fingerprint"))
