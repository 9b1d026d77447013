"""Where a multi-node rendezvous comes from: the spec, Slurm, or a torchrun/PyTorchJob-style environment.

Runs in the host (stdlib only, never torch), at the moment a training stage is launched
(`tt_stagekit.launcher.stage_arguments`): `resolve(settings, environ)` returns the four distributed settings
with the ones the chosen `rendezvous` mode reads filled in from `environ`. Nothing read here is written
back into the spec or into any stage fingerprint (node_rank differs per node).

- "spec": the four settings as written (no variable read).
- "slurm": nnodes from SLURM_NNODES (else SLURM_JOB_NUM_NODES), node_rank from SLURM_NODEID,
  rdzv_endpoint = the first host of SLURM_JOB_NODELIST (the compressed form `node[01-04,07]` expanded here,
  no `scontrol`) and MASTER_PORT (else 29500). nproc_per_node stays the spec's.
- "env": rdzv_endpoint = MASTER_ADDR and MASTER_PORT (else 29500), nnodes from NNODES (else PET_NNODES),
  node_rank from NODE_RANK (else PET_NODE_RANK). WORLD_SIZE and RANK are never read: under torchrun and
  PyTorchJob they count processes, or pods, depending on the launcher's version. nproc_per_node stays the spec's.

A variable missing or malformed raises `RendezvousError` naming the variable and the setting; values are
bounded (strict decimal ints, at most 1024 nodes, a nodelist of at most 4096 characters and 1024 hosts, a
hostname of at most 253 characters) and a value with control characters is never echoed.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Optional

DEFAULT_PORT = 29500
MODES = ("spec", "slurm", "env")
MAX_NODES = 1024
MAX_NODELIST = 4096
MAX_HOST = 253
_INT = re.compile(r"[0-9]{1,7}")
_HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]+")
_SHOWN = re.compile(r"[ -~]{0,80}")


class RendezvousError(ValueError):
    """A rendezvous variable is missing or malformed: the message names it and the setting."""


def _shown(value: str) -> str:
    """`value` quoted for a message, or a placeholder when it is long or holds control characters."""
    return repr(value) if _SHOWN.fullmatch(value) else f"(a value of {len(value)} characters, not shown)"


def _refuse(variable: str, value: Optional[str], setting: str, mode: str, what: str) -> RendezvousError:
    got = "is not set" if value is None else f"is {_shown(value)}, not {what}"
    return RendezvousError(f"{variable} {got}: rendezvous \"{mode}\" reads {setting} from it (set it, or use "
                           f"rendezvous \"spec\" and write {setting} in the spec)")


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, Optional[str]]:
    for name in names:
        if name in environ:
            return name, environ[name]
    return " or ".join(names), None


def _int(environ: Mapping[str, str], names: tuple[str, ...], setting: str, mode: str, low: int, high: int) -> int:
    name, value = _first(environ, names)
    what = f"a whole number from {low} to {high}"
    if value is None or not _INT.fullmatch(value) or not low <= int(value) <= high:
        raise _refuse(name, value, setting, mode, what)
    return int(value)


def _port(environ: Mapping[str, str], mode: str) -> int:
    if "MASTER_PORT" not in environ:
        return DEFAULT_PORT
    return _int(environ, ("MASTER_PORT",), "rdzv_endpoint's port", mode, 1, 65535)


def _host(value: str) -> bool:
    return 0 < len(value) <= MAX_HOST and _HOST.fullmatch(value) is not None


def _endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _range(text: str) -> list[str]:
    """`01-04` -> ["01", "02", "03", "04"] (zero padding kept, as Slurm writes it); `07` -> ["07"]."""
    low, sep, high = text.partition("-")
    if not low.isdigit() or (sep and not high.isdigit()) or len(low) > 7 or len(high) > 7:
        raise ValueError(text)
    if not sep:
        return [low]
    if int(high) < int(low) or int(high) - int(low) >= MAX_NODES:
        raise ValueError(text)
    return [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if depth not in (0, 1):
            raise ValueError(text)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(text)
    return [*parts, text[start:]]


def _expand_one(item: str) -> list[str]:
    """`node[01-02]-ib[1,3]` -> node01-ib1, node01-ib3, node02-ib1, node02-ib3 (brackets may repeat)."""
    head, bracket, rest = item.partition("[")
    if not bracket:
        return [item]
    inner, closed, tail = rest.partition("]")
    if not closed or not inner:
        raise ValueError(item)
    hosts: list[str] = []
    for number in (n for part in inner.split(",") for n in _range(part)):
        for end in _expand_one(tail):
            hosts.append(head + number + end)
            if len(hosts) > MAX_NODES:
                raise ValueError(item)
    return hosts


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list (`node[01-04,07],gpu-a`) as host names, in order. ValueError when malformed."""
    if not text or len(text) > MAX_NODELIST:
        raise ValueError(text)
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        for host in _expand_one(item):
            if not _host(host) or "[" in host or "]" in host:
                raise ValueError(text)
            hosts.append(host)
            if len(hosts) > MAX_NODES:
                raise ValueError(text)
    return hosts


def _slurm(environ: Mapping[str, str]) -> dict[str, Any]:
    nnodes = _int(environ, ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"), "nnodes", "slurm", 1, MAX_NODES)
    node_rank = _int(environ, ("SLURM_NODEID",), "node_rank", "slurm", 0, nnodes - 1)
    listed = environ.get("SLURM_JOB_NODELIST")
    try:
        hosts = expand_nodelist(listed) if listed is not None else []
    except ValueError:
        hosts = []
    if not hosts:
        raise _refuse("SLURM_JOB_NODELIST", listed, "rdzv_endpoint", "slurm", "a Slurm host list (node[01-04])")
    return {"nnodes": nnodes, "node_rank": node_rank, "rdzv_endpoint": _endpoint(hosts[0], _port(environ, "slurm"))}


def _env(environ: Mapping[str, str]) -> dict[str, Any]:
    nnodes = _int(environ, ("NNODES", "PET_NNODES"), "nnodes", "env", 1, MAX_NODES)
    node_rank = _int(environ, ("NODE_RANK", "PET_NODE_RANK"), "node_rank", "env", 0, nnodes - 1)
    host = environ.get("MASTER_ADDR")
    if host is None or not _host(host.strip()):
        raise _refuse("MASTER_ADDR", host, "rdzv_endpoint", "env", "a host name or address")
    return {"nnodes": nnodes, "node_rank": node_rank, "rdzv_endpoint": _endpoint(host.strip(), _port(environ, "env"))}


def resolve(settings: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """`settings` with nnodes, node_rank and rdzv_endpoint read from `environ` (default os.environ) under the
    "slurm" and "env" modes; unchanged under "spec" (or no `rendezvous` key)."""
    mode = settings.get("rendezvous") or "spec"
    if mode == "spec":
        return dict(settings)
    if mode not in MODES:
        raise RendezvousError(f"rendezvous is {_shown(str(mode))}, not one of {', '.join(MODES)}")
    read = (_slurm if mode == "slurm" else _env)(os.environ if environ is None else environ)
    return {**settings, **read}
