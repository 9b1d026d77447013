"""Discovering engine plugins through the entry-point group `tt`.

Each entry point is imported on its own, so one broken plugin is reported (and
listed by `tt engines list`) instead of breaking `tt`. Switches, all optional:

- `TT_PLUGINS=a,b`          load only these entry points
- `TT_DISABLE_PLUGINS=a,b`  skip these entry points
- `TT_PLUGINS_STRICT=1`     a plugin that fails to load is fatal (for plugin authors' tests)
- `TT_TRACE_HOOKS=1`        print every hook call and result to stderr (see `call_hookimpl`)

Containment: a plugin's code runs only through `_contained` (import) and
`call_hookimpl` (hooks). There, `SystemExit` and `KeyboardInterrupt` raised by
the plugin (a stray `sys.exit`, an observer raising Ctrl-C) become a
`PluginError`, reported like any other exception; whatever it prints goes to
stderr, so `--json` output stays JSON. A hook result that is not an `Engine`,
or an engine whose name is not a safe identifier (`ENGINE_NAME`), is a listed
problem, never a crash.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import traceback
from dataclasses import dataclass, field, replace
from functools import lru_cache
from collections.abc import Iterator
from importlib import metadata

import pluggy

from tt_host.errors import TTError
from tt_host import HOST_API_VERSION, hookspecs
from tt_host.engine import Engine, needs_error

GROUP = "tt"
# Engine names become folder names (environments) and parts of model ids: lower-case letters, digits, `_`, `-`.
ENGINE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")


@dataclass
class PluginProblem:
    """A plugin (or one engine of it) that cannot be used, and why."""

    plugin: str
    distribution: str
    version: str
    error: str
    engine: str | None = None


@dataclass
class Plugins:
    manager: pluggy.PluginManager
    engines: dict[str, Engine] = field(default_factory=dict)
    problems: list[PluginProblem] = field(default_factory=list)

    def engine(self, name: str) -> Engine:
        if name in self.engines:
            return self.engines[name]
        problem = next((p for p in self.problems if p.engine == name), None)
        if problem is not None:
            raise UnknownEngineError(f"engine {name!r} cannot be used: {problem.error}")
        installed = ", ".join(sorted(self.engines)) or "none"
        raise UnknownEngineError(
            f"unknown engine {name!r}; installed engines: {installed}. "
            "Run `tt engines list` to see every plugin and its load errors."
        )


class UnknownEngineError(TTError, LookupError):
    """The spec or command names an engine no installed plugin provides (exit 2)."""

    exit_code = 2


class PluginLoadError(TTError, RuntimeError):
    """A plugin failed to load while TT_PLUGINS_STRICT is set (exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message} (TT_PLUGINS_STRICT is set)")


class PluginError(RuntimeError):
    """A plugin's code tried to end the process (SystemExit, KeyboardInterrupt); contained like any error."""


_in_plugin = threading.local()


class _ThreadStdout:
    """`sys.stdout` while plugin code runs on other threads (observers): writes made by a thread that is in
    plugin code go to stderr, everyone else's to the real stdout. `redirect_stdout` swaps the one global
    `sys.stdout`, which is right on the main thread only: threads entering and leaving it out of order
    would leave the host's own output on stderr."""

    def __init__(self, real) -> None:
        self.real = real

    def _target(self):
        return sys.stderr if getattr(_in_plugin, "active", False) else self.real

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str):
        return getattr(self.real, name)


_stdout_lock = threading.Lock()


def _thread_redirect() -> None:
    with _stdout_lock:
        if not isinstance(sys.stdout, _ThreadStdout):
            sys.stdout = _ThreadStdout(sys.stdout)


@contextlib.contextmanager
def _to_stderr():
    """This thread's prints go to stderr while plugin code runs."""
    if threading.current_thread() is threading.main_thread():
        sys.stdout.flush()
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    _thread_redirect()
    _in_plugin.active = True
    try:
        yield
    finally:
        _in_plugin.active = False


@contextlib.contextmanager
def _contained(plugin: str):
    """Run plugin code: its prints go to stderr, its SystemExit/KeyboardInterrupt become a PluginError."""
    try:
        with _to_stderr():
            yield
    except (SystemExit, KeyboardInterrupt) as exc:
        kind = f"SystemExit({exc.code!r})" if isinstance(exc, SystemExit) else "KeyboardInterrupt"
        raise PluginError(f"plugin {plugin!r} raised {kind}") from None


def _names(variable: str) -> set[str] | None:
    value = os.environ.get(variable, "").strip()
    return {n.strip() for n in value.split(",") if n.strip()} if value else None


def _api_version(text: str) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def _api_compatible(declared: str) -> bool:
    """Same major, and no newer minor than this host offers (a plugin may use features added in its minor)."""
    try:
        (major, minor), (host_major, host_minor) = _api_version(declared), _api_version(HOST_API_VERSION)
    except ValueError:
        return False
    return major == host_major and minor <= host_minor


def _distribution(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "", ""
    return dist.metadata["Name"] or "", dist.version or ""


def load_plugins() -> Plugins:
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    if os.environ.get("TT_TRACE_HOOKS"):
        manager.trace.root.setwriter(lambda message: sys.stderr.write(message))
        manager.enable_tracing()
    only, disabled = _names("TT_PLUGINS"), _names("TT_DISABLE_PLUGINS") or set()
    strict = bool(os.environ.get("TT_PLUGINS_STRICT"))
    plugins = Plugins(manager)
    owners: dict[str, str] = {}
    seen: set[str] = set()
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
        if ep.name in seen or (only is not None and ep.name not in only) or ep.name in disabled:
            continue
        seen.add(ep.name)
        dist_name, dist_version = _distribution(ep)
        module = None
        try:
            with _contained(ep.name):
                module = ep.load()
            manager.register(module, name=ep.name)
            impls = [i for i in manager.hook.tt_engines.get_hookimpls() if i.plugin_name == ep.name]
            records = [record for impl in impls for record in (call_hookimpl(impl, "tt_engines") or [])]
        except Exception as exc:  # a broken plugin must not break tt
            if strict:
                raise PluginLoadError(f"plugin {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            plugins.problems.append(PluginProblem(ep.name, dist_name, dist_version, detail))
            if module is not None and manager.is_registered(module):
                manager.unregister(module)
            continue
        for record in records:
            problem = _check_record(record, ep.name, owners)
            if problem is None:
                record = replace(record, distribution=dist_name, distribution_version=dist_version)
            if problem:
                if strict:
                    raise PluginLoadError(problem)
                plugins.problems.append(
                    PluginProblem(ep.name, dist_name, dist_version, problem,
                                  engine=record.name if isinstance(record, Engine) and isinstance(record.name, str)
                                  else None)
                )
                continue
            owners[record.name] = ep.name
            plugins.engines[record.name] = record
    # An engine name claimed twice is unusable until one plugin is removed.
    for problem in plugins.problems:
        if problem.engine in plugins.engines and "claimed by" in problem.error:
            del plugins.engines[problem.engine]
    return plugins


def _check_record(record: object, plugin: str, owners: dict[str, str]) -> str | None:
    if not isinstance(record, Engine):
        return f"plugin {plugin!r} yielded {type(record).__name__}, not tt_host.engine.Engine"
    if not isinstance(record.name, str) or not ENGINE_NAME.fullmatch(record.name):
        return (f"plugin {plugin!r} names an engine {str(record.name)[:60]!r}: an engine name is 1-40 lower-case "
                "letters, digits, `_` or `-`, starting with a letter; rename it in the plugin")
    if not isinstance(record.stages, (tuple, list)):
        return f"engine {record.name!r}: stages must be a tuple of tt_host.engine.Stage"
    bad_stage = next((str(getattr(st, "name", st))[:60] for st in record.stages
                      if not isinstance(getattr(st, "name", None), str) or not ENGINE_NAME.fullmatch(st.name)
                      or st.name == "logs"), None)
    if bad_stage is not None:  # stage names are folder names inside the run directory
        return (f"engine {record.name!r} has a stage named {bad_stage!r}: a stage name is 1-40 lower-case letters, "
                "digits, `_` or `-`, starting with a letter, and not `logs`; rename it in the plugin")
    if not _api_compatible(record.host_api):
        return (
            f"engine {record.name!r} needs host API {record.host_api}, this tt offers {HOST_API_VERSION}; "
            "upgrade the plugin or tt"
        )

    if problem := needs_error(record.stages):
        return f"engine {record.name!r}: {problem}; fix Stage.needs in the plugin"
    if problem := model_kinds_error(record):
        return f"engine {record.name!r}: {problem}; fix Engine.model_kinds in the plugin"
    if record.name in owners:
        return (
            f"engine {record.name!r} is claimed by plugins {owners[record.name]!r} and {plugin!r}; "
            "uninstall one of them (or disable one with TT_DISABLE_PLUGINS)"
        )
    return None


def model_kinds_error(record: Engine) -> str | None:
    """What is wrong with an engine's declared model kinds (None when nothing)."""
    from tt_host.engine import SERVE_ON_BASE, SERVE_OWN, SERVE_WAYS

    seen: set[str] = set()
    for declared in record.model_kinds:
        if declared.kind in seen:
            return f"model kind {declared.kind!r} is declared twice"
        seen.add(declared.kind)
        if declared.serve not in SERVE_WAYS:
            return f"model kind {declared.kind!r}: serve must be one of {', '.join(SERVE_WAYS)}, not {declared.serve!r}"
        if declared.serve == SERVE_OWN and record.serve is None:
            return f"model kind {declared.kind!r} is served by the engine's own server, but Engine.serve is not set"
        if declared.serve == SERVE_ON_BASE and not declared.info_file:
            return f"model kind {declared.kind!r} is served on its base, which its info_file must name"
        if declared.folder is not None and (declared.folder.startswith("/") or ".." in declared.folder.split("/")):
            return f"model kind {declared.kind!r}: folder {declared.folder!r} must be a path inside the run directory"
    return None


def call_hookimpl(impl: pluggy.HookImpl, hook: str, **kwargs: object) -> object:
    """Call one plugin's implementation of a hook on its own (so a failure stays that plugin's).

    The host calls implementations one by one rather than through pluggy's hook
    caller, so pluggy's tracing never sees them; TT_TRACE_HOOKS traces here.
    Generators (e.g. from `tt_engines`) are consumed, so their errors surface here.
    """
    tracing = bool(os.environ.get("TT_TRACE_HOOKS"))
    if tracing:
        shown = ", ".join(f"{k}={str(v)[:120]}" for k, v in kwargs.items())
        sys.stderr.write(f"tt hook: {hook}({shown}) -> plugin {impl.plugin_name!r}\n")
    try:
        with _contained(impl.plugin_name):
            result = impl.function(**kwargs)
            if isinstance(result, Iterator):
                result = list(result)
    except Exception as exc:
        if tracing:
            sys.stderr.write(f"tt hook: {hook} in plugin {impl.plugin_name!r} raised {exc!r}\n")
        raise
    if tracing:
        sys.stderr.write(f"tt hook: {hook} in plugin {impl.plugin_name!r} returned {str(result)[:200]}\n")
    return result


@lru_cache(maxsize=1)
def plugins() -> Plugins:
    """The plugins of this process, loaded once."""
    return load_plugins()
