"""How the host starts an engine environment's python: never with code from the working or run folder.

`python -m MOD` and `python -c CODE` put the current folder first on `sys.path`, so a `json.py` planted in a
shared run folder (or beside a spec, or in the folder `tt` was started from) would run inside the engine
environment. Every engine-environment python the host starts is therefore `python -P ...` (Python 3.11's safe
path: nothing is prepended to `sys.path`), and its environment carries `PYTHONSAFEPATH=1` so the processes it
starts in turn (torchrun's workers) are started the same way. Helpers that need no particular folder run
from a private temporary one (`private_folder`).
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

SAFE_PATH = "-P"
# Variables of the host's own interpreter that must not leak into an engine environment's python.
HOST_ONLY = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")
# A rank's place as torchrun (or a Kubeflow PyTorchJob pod, or an outer torchrun) leaves it in tt's own
# environment: a one-process stage would take them for its own and wait for peers that never come, and
# torchrun reads PET_* as defaults for the options tt does not pass (PET_RDZV_BACKEND would replace the
# static rendezvous). tt's launcher passes every torchrun option itself and torchrun sets these for its ranks,
# so none reaches an engine python; a spec reads them through `rendezvous: "env"` (tt_stagekit.rendezvous).
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                  "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT")
RANK_PREFIXES = ("PET_", "TORCHELASTIC_")


def python_command(python: str | Path, arguments: Sequence[str]) -> list[str]:
    """`python -P ARGUMENTS`: the argument list that starts an engine environment's python safely."""
    return [str(python), SAFE_PATH, *arguments]


def python_env(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of an engine-environment python: the host's, less its import path and any inherited
    torchrun rank variables (RANK_VARIABLES), with PYTHONSAFEPATH."""
    env = dict(os.environ if base is None else base)
    for name in (*HOST_ONLY, *RANK_VARIABLES, *(n for n in env if n.startswith(RANK_PREFIXES))):
        env.pop(name, None)
    env["PYTHONSAFEPATH"] = "1"
    env.update(extra)
    return env


@contextmanager
def private_folder(prefix: str = "tt-helper-") -> Iterator[Path]:
    """A fresh 0700 temporary folder to run a helper in, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield Path(folder)
