"""Safe names: model ids and their parts, folder names made from ids, and paths proven inside their owner.

A model id names a registry file (`$TT_HOME/models/<id>.json`) and may name a
folder (`$TT_HOME/exports/<id>`), so it is made of `MODEL_ID` characters only:
lower-case letters, digits, `.` and `-`, starting with a letter or digit (never
`.`/`..`, never a `/`). Ids are made from `part()` pieces and checked again
wherever one is read back (a registry entry or a `run.json` may have been
edited). Every folder tt deletes or chmods is first passed through `inside()`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

MODEL_ID = re.compile(r"[a-z0-9][a-z0-9.-]{0,199}")


class OutsideError(RuntimeError):
    """A path tt was about to delete or chmod is not inside the folder that owns it."""


def part(text: object, limit: int = 40) -> str:
    """One piece of an id: lower-case letters and digits, anything else collapsed into `-`."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")[:limit].strip("-")


def is_model_id(value: object) -> bool:
    return isinstance(value, str) and MODEL_ID.fullmatch(value) is not None


def folder_name(model_id: str) -> str:
    """A folder name for an id: the id itself when it is safe, else its safe part plus a digest of the whole
    (an id registered by an older tt with spaces or other characters still gets a folder of its own)."""
    if is_model_id(model_id):
        return model_id
    digest = hashlib.sha256(model_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{part(model_id, 60) or 'model'}-{digest}"


def inside(path: Path, root: Path) -> Path:
    """`path`, once proven to lie strictly inside `root` (both resolved, symlinks followed); else OutsideError."""
    resolved, owner = Path(path).resolve(), Path(root).resolve()
    if resolved == owner or owner not in resolved.parents:
        raise OutsideError(f"refusing to touch {path}: it is not inside {root}")
    return resolved
