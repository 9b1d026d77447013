"""Many adapters on one base (`tt serve A B ...`): which adapter a request names, and which are resident.

`Catalog` (any thread, under its lock): the served adapters, each a registered id and version pinned by the
sha256 of its artifact-manifest.json. A request's `model` is resolved by `find`: `ID@n`, `ID` (its highest
served version), a unique prefix of a served id (`@n` after it too), or `active`, the adapter the activation
history (`activation_file`, re-read whenever its size, mtime or inode changes: one stat per request) has on top
of its stack, when that version with that manifest digest is served. `add` serves a new version (`POST
/admin/adapters`); the same id and version with another digest replaces the old entry (a new `uid`, so the old
weights can never answer for it).

`Residency` (the scheduler thread only): the adapters loaded into the LoRA bank over the base (`lora_bank`: one
slot each), at most `max_resident`; `ensure` loads what a prefill needs, evicting the least recently used
adapter no running row uses (its slot zeroed and reused). Every load first checks the folder against its
manifest and the manifest against the pinned digest (`ManifestRefused` otherwise), then reads the adapter
(`lora_bank.Refused` for a setting the bank cannot apply exactly): either way that adapter is never loaded.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from tt_stagekit import activations, manifest
from tt_stagekit.contract import ServedModel
from tt_engine_adapter.serve import lora_bank
from tt_engine_adapter.serve.request import ApiError

ACTIVE = "active"
_names = itertools.count()


@dataclass(eq=False)
class Entry:
    """A served adapter version; `uid` names it in the residency (unique per entry, ever)."""

    spec: ServedModel
    uid: str

    @property
    def reference(self) -> str:
        return self.spec.name if self.spec.version is None else f"{self.spec.name}@{self.spec.version}"


class ManifestRefused(Exception):
    """An adapter folder that is not what its pinned manifest says; it is not loaded."""


def check_folder(spec: ServedModel) -> None:
    """ManifestRefused unless `spec.path`'s manifest has the pinned sha256 and every file matches it."""
    path = Path(spec.path)
    try:
        digest = hashlib.sha256((path / manifest.MANIFEST).read_bytes()).hexdigest()
    except OSError as exc:
        raise ManifestRefused(f"{spec.name}: cannot read its {manifest.MANIFEST} ({exc.strerror or exc})") from None
    if digest != spec.manifest_sha256:
        raise ManifestRefused(f"{spec.name}: its {manifest.MANIFEST} sha256 is {digest}, pinned "
                              f"{spec.manifest_sha256}")
    _, problems = manifest.verify(path)
    if problems:
        raise ManifestRefused(f"{spec.name} failed its manifest check: "
                              + "; ".join(f"{what}: {why}" for what, why in problems[:5]))


def log(message: str) -> None:
    """A line in the server log (stderr; stdout carries events)."""
    print(message, file=sys.stderr, flush=True)


def _not_found(message: str) -> ApiError:
    return ApiError(404, message, "model", "model_not_found")


class Catalog:
    """The served adapters and how a request's `model` names one (see the module docstring)."""

    def __init__(self, adapters: Iterable[ServedModel], activation_file: Optional[str] = None):
        self._lock = threading.Lock()
        self._entries: list[Entry] = [Entry(spec, f"a{next(_names)}") for spec in adapters]
        self._activation_file = activation_file
        self._seen: Optional[tuple] = None
        self._active: Optional[dict[str, Any]] = None
        self._active_error: Optional[str] = None

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self._entries)

    def add(self, spec: ServedModel) -> tuple[Entry, str]:
        """Serve `spec`; ("added" | "replaced" | "unchanged"). The same version with the same digest is the entry
        already served; with another digest it replaces it."""
        with self._lock:
            for i, entry in enumerate(self._entries):
                if (entry.spec.name, entry.spec.version) == (spec.name, spec.version):
                    if entry.spec.manifest_sha256 == spec.manifest_sha256:
                        return entry, "unchanged"
                    self._entries[i] = Entry(spec, f"a{next(_names)}")
                    return self._entries[i], "replaced"
            self._entries.append(Entry(spec, f"a{next(_names)}"))
            return self._entries[-1], "added"

    def find(self, model: str) -> Entry:
        """The entry a request's `model` names, or ApiError 404 saying why none."""
        if model == ACTIVE:
            return self._find_active()
        name, _, version = model.partition("@")
        with self._lock:
            entries = list(self._entries)
        ids = sorted({e.spec.name for e in entries})
        if name not in ids:
            begun = [i for i in ids if i.startswith(name)] if name else []
            if len(begun) > 1:
                raise _not_found(f"the model {model!r} begins several served ids ({', '.join(begun)}); give more "
                                 "of the id")
            if not begun:
                raise _not_found(f"the model {model!r} is not served here; GET /v1/models lists what is")
            name = begun[0]
        versions = [e for e in entries if e.spec.name == name]
        if version:
            chosen = [e for e in versions if str(e.spec.version) == version]
            if not chosen:
                raise _not_found(f"version {version!r} of {name} is not served here (served: "
                                 + ", ".join(e.reference for e in versions) + "); load it with POST /admin/adapters")
            return chosen[0]
        return max(versions, key=lambda e: e.spec.version or 0)

    def _find_active(self) -> Entry:
        state = self.active_state()
        if state is None:
            raise _not_found("no model is active (`tt models activate ID`), so 'active' names none")
        with self._lock:
            entries = list(self._entries)
        for entry in entries:
            if entry.spec.name == state["model"] and state.get("version") in (None, entry.spec.version) and \
                    state.get("manifest_sha256") in (None, entry.spec.manifest_sha256):
                return entry
        reference = state["model"] if state.get("version") is None else f"{state['model']}@{state['version']}"
        raise _not_found(f"the active model {reference!r} is not served here (served: "
                         + ", ".join(e.reference for e in entries) + "); load it with POST /admin/adapters")

    def active_state(self) -> Optional[dict[str, Any]]:
        """The activation on top of the history's stack (None: nothing active); re-read when the file changed."""
        if self._activation_file is None:
            raise _not_found("this server was started without the activation history, so 'active' names none")
        with self._lock:
            try:
                with open(self._activation_file, "rb") as handle:
                    stat = os.fstat(handle.fileno())
                    seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
                    if seen != self._seen:
                        records, bad = activations.parse(handle.read())
                        stack, _ = activations.replay(records)
                        self._seen, self._active = seen, (stack[-1] if stack else None)
                        self._active_error = (f"the activation history has a line that is not a record "
                                              f"(line {bad}); see `tt models history`") if bad else None
            except FileNotFoundError:
                self._seen, self._active, self._active_error = None, None, None
            if self._active_error:
                raise ApiError(503, self._active_error, "model", "activation_unreadable", "server_error")
            return self._active


class Residency:
    """The adapters in the LoRA bank (see the module docstring); the scheduler thread only."""

    def __init__(self, chat_model: Any, limit: Optional[int], catalog: Optional[Catalog] = None):
        self.chat_model, self.limit, self.catalog = chat_model, limit, catalog
        served = len(catalog.entries()) if catalog is not None else 1
        self.bank = lora_bank.LoraBank(chat_model.model, limit or served)
        self._order: list[Entry] = []  # least recently used first
        self._slots: dict[Entry, int] = {}
        self.loads = self.evictions = 0

    @property
    def resident(self) -> list[Entry]:
        return list(self._order)

    def fits(self, in_use: set[str], entry: Entry) -> bool:
        """Whether `entry` can run beside the adapters `in_use` (uids) within the limit."""
        return self.limit is None or len(in_use | {entry.uid}) <= self.limit

    def ensure(self, entries: Iterable[Entry], in_use: set[str]) -> list[tuple[Entry, str]]:
        """Load every entry not resident (evicting least recently used ones outside `in_use` and `entries`);
        returns the (entry, reason) of each that failed its manifest check or was refused by the bank (it stays
        unloaded)."""
        wanted = list(dict.fromkeys(entries))
        keep = set(in_use) | {e.uid for e in wanted}
        if self.catalog is not None:
            self.drop_replaced(self.catalog.entries(), keep)
        failed = []
        for entry in wanted:
            if entry in self._order:
                self._order.remove(entry)
                self._order.append(entry)
                continue
            try:
                check_folder(entry.spec)
                prepared = self.bank.read(entry.spec.path)
            except (ManifestRefused, lora_bank.Refused) as exc:
                reason = str(exc) if isinstance(exc, ManifestRefused) else f"{entry.spec.name}: {exc}"
                log(f"adapter {entry.reference} not loaded: {reason}")
                failed.append((entry, reason))
                continue
            while self.limit is not None and len(self._order) >= self.limit:
                victim = next((e for e in self._order if e.uid not in keep), None)
                if victim is None:
                    break
                self.evict(victim, "least recently used")
            self._slots[entry] = self.bank.install(prepared)
            self._order.append(entry)
            self.loads += 1
            log(f"adapter {entry.reference} loaded; {self._count()}")
        return failed

    def _count(self) -> str:
        return f"resident {len(self._order)}" + (f" of {self.limit} (--max-adapters)" if self.limit else "")

    def evict(self, entry: Entry, why: str) -> None:
        self._order.remove(entry)
        self.bank.free(self._slots.pop(entry))
        self.evictions += 1
        log(f"adapter {entry.reference} evicted ({why})")

    def drop_replaced(self, served: Iterable[Entry], in_use: set[str]) -> None:
        """Evict resident entries no longer served (replaced by a same-name reload) once no row uses them."""
        alive = set(served)
        for entry in [e for e in self._order if e not in alive and e.uid not in in_use]:
            self.evict(entry, "replaced by a new load under its name")

    def slot(self, entry: Entry) -> int:
        return self._slots[entry]

    def rows(self, entries: list[Entry]) -> Any:
        """A context for one forward pass whose row i runs with `entries[i]`'s LoRA; RuntimeError naming an
        entry that is not loaded (the pass would otherwise answer from the base or another adapter)."""
        missing = sorted({e.reference for e in entries if e not in self._slots})
        if missing:
            raise RuntimeError(f"adapters {missing} are not loaded")
        return self.bank.rows([self._slots[e] for e in entries])
