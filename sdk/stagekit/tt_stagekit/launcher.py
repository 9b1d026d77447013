"""Starting a training stage under `torch.distributed.run` (torchrun) when the world size is above 1.

Two halves:

- `stage_arguments(settings, module)` runs in the host (stdlib only, never
  torch): the interpreter arguments for `Stage.launch`. World size 1 gives the
  plain `-m <module>`; otherwise `-m tt_stagekit.launcher <torchrun
  arguments> -m <module>` and the host appends the request path.
- `main()` runs in the engine environment: it is torchrun's own launcher
  (`torch.distributed.run.run`), with exit codes mapped back onto the stage
  protocol. torchrun turns every failure into exit 1; here a stage that every
  rank refused as invalid input still exits 2, a stopped stage (SIGTERM/SIGINT,
  which torchrun forwards to every rank) exits 130, and a rank that died from a
  signal is named in one error event.

`DistributedSettings` declares the five settings once (`tt_stagekit.settings`):
an engine's settings dataclass inherits it in the block that carries them, and
the host's `tt_host.spec.schema.DistributedSettings` is derived from it.

Single node: `--standalone` (a private rendezvous on a free local port).
Several nodes: static rendezvous at `rdzv_endpoint` (host:port of node 0),
with `node_rank` fixing each node's ranks; `rendezvous` "slurm" or "env" reads
those from the scheduler's environment at launch (`tt_stagekit.rendezvous`).
See docs/distributed.md.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, Sequence

from tt_stagekit import rendezvous as rendezvous_env, signals
from tt_stagekit.settings import setting
from tt_stagekit.contract import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID

MODULE = "tt_stagekit.launcher"
DEFAULT_MASTER_PORT = rendezvous_env.DEFAULT_PORT


@dataclass(frozen=True)
class DistributedSettings:
    """nproc_per_node, nnodes, node_rank and rdzv_endpoint, declared once (`tt_stagekit.settings`).

    An engine's settings dataclass inherits it in the block that holds the four settings (its fields come
    first); the host's `DistributedSettings` is derived from it and adds the checks between them. Under
    torchrun a rank learns its place from the environment (`tt_stagekit.distributed`); these fields say what
    was asked.
    """

    nproc_per_node: int = setting(1, ge=1, le=64, help="Processes (GPUs) per node for the stages that train; above 1 "
                                  "they run under torchrun with DistributedDataParallel (docs/distributed.md).")
    nnodes: int = setting(1, ge=1, le=1024, help="Machines taking part; above 1 needs rdzv_endpoint and node_rank.")
    node_rank: int = setting(0, ge=0, le=1023, help="This machine's index among nnodes (0 on the machine at "
                             "rdzv_endpoint).")
    rdzv_endpoint: Optional[str] = setting(None, min_length=1, max_length=255, help="host:port of node 0 for a "
                                           "multi-node run (torchrun's master address and port).")
    rendezvous: Literal["spec", "slurm", "env"] = setting("spec", help="Where nnodes, node_rank and rdzv_endpoint "
                                                         "come from: spec (as written), slurm (SLURM_* variables) or "
                                                         "env (MASTER_ADDR, NNODES, NODE_RANK), read when a stage "
                                                         "starts (docs/distributed.md).")

    @property
    def world_size(self) -> int:
        """How many processes train: nproc_per_node × nnodes."""
        return self.nproc_per_node * self.nnodes


def world_size(settings: Mapping[str, Any]) -> int:
    return int(settings.get("nproc_per_node") or 1) * int(settings.get("nnodes") or 1)


def _grace() -> int:
    try:
        grace = float(os.environ.get("TT_STAGE_GRACE_SECONDS", "120"))
    except ValueError:
        grace = 120.0
    # torchrun waits this long for ranks to checkpoint after SIGTERM; the host kills after its grace.
    return max(5, int(grace) - 10)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host:
        return endpoint, DEFAULT_MASTER_PORT
    return host.strip("[]"), int(port)


def endpoint_error(value: str) -> Optional[str]:
    """Why `value` is not a usable rdzv_endpoint (host:port), or None."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"{value!r} is not host:port (for example 10.0.0.1:29500)"
    return None


def nodes_error(prefix: str, nnodes: int, node_rank: int, rdzv_endpoint: Optional[str]) -> Optional[str]:
    """Why the multi-node settings under `prefix` (e.g. "foundation.") cannot work together, or None."""
    if nnodes > 1 and rdzv_endpoint is None:
        return f"{prefix}nnodes is {nnodes} but {prefix}rdzv_endpoint is not set: give node 0's host:port"
    if node_rank >= nnodes:
        return f"{prefix}node_rank ({node_rank}) must be smaller than {prefix}nnodes ({nnodes})"
    return None


def torchrun_arguments(settings: Mapping[str, Any]) -> list[str]:
    """torchrun options for nproc_per_node / nnodes / node_rank / rdzv_endpoint."""
    nproc = int(settings.get("nproc_per_node") or 1)
    nnodes = int(settings.get("nnodes") or 1)
    args = ["--nproc_per_node", str(nproc), "--max_restarts", "0", "--monitor_interval", "0.2",
            "--shutdown_timeout", str(_grace())]
    if nnodes == 1:
        return ["--standalone", "--nnodes", "1", *args]
    host, port = split_endpoint(str(settings["rdzv_endpoint"]))
    return ["--nnodes", str(nnodes), "--node_rank", str(int(settings.get("node_rank") or 0)),
            "--master_addr", host, "--master_port", str(port), *args]


def stage_arguments(settings: Mapping[str, Any], module: str) -> list[str]:
    """`Stage.launch` arguments: plain `-m module` for one process, torchrun otherwise. Under rendezvous
    "slurm"/"env" the node settings are read from this process's environment now (`tt_stagekit.rendezvous`,
    which raises `RendezvousError` naming a missing or malformed variable)."""
    settings = rendezvous_env.resolve(settings)
    if world_size(settings) <= 1:
        return ["-m", module]
    return ["-m", MODULE, *torchrun_arguments(settings), "-m", module]


def _error(message: str) -> None:
    sys.stdout.write(json.dumps({"type": "log", "level": "error", "message": message}) + "\n")
    sys.stdout.flush()


def _exit_code(failure: Any) -> int:
    code = int(getattr(failure, "exitcode", 1))
    return code if code in (EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED) else EXIT_FAILED


def _count_copies_once(api: Any) -> None:
    """torchrun's signal handler raises on every signal, and a second raise cuts the agent's wait for
    its ranks' checkpoints short: let copies of the first request through only once."""
    original = api._terminate_process_handler
    requests = signals.StopRequests()

    def handler(signum: int, frame: Any) -> None:
        if requests.receive() != signals.COPY:
            original(signum, frame)

    api._terminate_process_handler = handler  # looked up when torchrun installs its handlers


def _launch(argv: Optional[Sequence[str]]) -> int:
    signals.watch_host()  # SIGTERM when tt dies: the agent then stops its ranks at a step boundary
    os.environ[signals.HOST_PID_ENV] = str(os.getpid())  # each rank's host is this agent
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    args = get_args_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    _count_copies_once(api)
    try:
        run(args)
    except ChildFailedError as exc:
        # SIGTERM is what torchrun itself sends the survivors once a rank failed (it lists them among the
        # failures too): a rank killed by any other signal is the cause; else the first rank that exited by
        # itself (a refusal stays exit 2 when a slower rank was stopped before it got as far); a rank killed
        # by SIGTERM only when no rank did either.
        deaths = {r: -int(f.exitcode) for r, f in exc.failures.items() if int(getattr(f, "exitcode", 1)) < 0}
        causes = sorted(r for r, code in deaths.items() if code != signal.SIGTERM)
        exited = [r for r in exc.failures if r not in deaths]
        if not causes and exited:
            return _exit_code(exc.failures[min(exited, key=lambda r: exc.failures[r].timestamp)])
        if not deaths:
            return EXIT_FAILED
        rank = causes[0] if causes else min(deaths)
        code, pid = deaths[rank], exc.failures[rank].pid
        try:
            name = signal.Signals(code).name
        except ValueError:
            name = f"signal {code}"
        _error(f"distributed rank {rank} (pid {pid}) was killed by {name}; every other rank was stopped, "
               "the run failed (resume with --resume from the last checkpoint)")
        return 1
    except SignalException:
        return EXIT_INTERRUPTED
    return 0


def main(argv: Optional[Sequence[str]] = None) -> None:
    code = _launch(argv)
    gc.freeze()  # skip the exit-time collection of torch's objects (seconds on a loaded CPU): nothing needs it
    sys.exit(code)


if __name__ == "__main__":
    main()
