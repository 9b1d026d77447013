"""Whether a process's renames were durable, read from strace: the check behind the tests of every atomic writer.

`command(log)` is the strace prefix that records, for a process and its children, every fsync/fdatasync (with the
path of the descriptor, `-y`) and every rename (`--seccomp-bpf`: other calls run untraced, at full speed). `undurable(log, root)` names each rename under `root` that
published something without making it durable: a file renamed into place must have been fsynced under its
temporary name before the rename, a folder renamed into place must have had every file it holds (as found under
its final name once the process is done) fsynced before, and the folder the rename happened in must be fsynced
after it. A rename of something already published (an old target moved aside) and one whose result is gone by
the end (a folder moved aside and deleted) publish nothing and are not judged. Stdlib only; Linux with strace.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SYSCALLS = ("fsync", "fdatasync", "rename", "renameat", "renameat2")
_CALL = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+(\w+)\((.*)$")
_FD_PATH = re.compile(r"^-?\d+<(.*)>$")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def command(log: Path) -> list[str]:
    """The strace prefix that writes what `undurable` reads to `log`."""
    return ["strace", "-f", "--seccomp-bpf", "-qq", "-y", "-s", "65536", "-e", f"trace={','.join(SYSCALLS)}", "-o", str(log)]


def _unescape(text: str) -> str:
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode("utf-8")


def _args(rest: str) -> list[str]:
    """A call's arguments up to its closing parenthesis, split on top-level commas (strings kept whole)."""
    args, depth, current, quoted, escaped = [], 0, "", False, False
    for char in rest:
        if quoted:
            current += char
            quoted = not (char == '"' and not escaped)
            escaped = char == "\\" and not escaped
            continue
        if char == '"':
            quoted, current = True, current + char
        elif char in "<([{":
            depth, current = depth + 1, current + char
        elif char in ">)]}" and depth:
            depth, current = depth - 1, current + char
        elif char == ")" and not depth:
            break
        elif char == "," and not depth:
            args, current = args + [current.strip()], ""
        else:
            current += char
    return args + ([current.strip()] if current.strip() else [])


def _path(dirfd: str, name: str) -> str:
    found = _STRING.fullmatch(name)
    text = _unescape(found.group(1)) if found else name
    if text.startswith("/"):
        return os.path.normpath(text)
    base = _FD_PATH.match(dirfd.replace("AT_FDCWD", "-100"))
    return os.path.normpath(os.path.join(base.group(1) if base else "", text))


def events(text: str) -> list[tuple[str, ...]]:
    """("fsync", path) and ("rename", source, target) in the order the calls started; failed calls left out."""
    found: list[tuple[str, ...]] = []
    for line in text.splitlines():
        match = _CALL.match(line.strip().removesuffix(" <unfinished ...>"))
        if not match or match.group(2) not in SYSCALLS or re.search(r"= -1 E\w+", line):
            continue
        name, args = match.group(2), _args(match.group(3))
        if name in ("fsync", "fdatasync") and args:
            fd = _FD_PATH.match(args[0])
            if fd:
                found.append(("fsync", os.path.normpath(_unescape(fd.group(1)))))
        elif name == "rename" and len(args) >= 2:
            found.append(("rename", _path("", args[0]), _path("", args[1])))
        elif name in ("renameat", "renameat2") and len(args) >= 4:
            found.append(("rename", _path(args[0], args[1]), _path(args[2], args[3])))
    return found


def undurable(log: Path, root: Path) -> list[str]:
    """Each rename under `root` in the strace `log` that published something not durably (see the module doc)."""
    root = Path(os.path.normpath(root))
    trace = events(Path(log).read_text(encoding="utf-8", errors="replace"))
    problems: list[str] = []
    published: set[str] = set()
    synced: set[str] = set()  # paths whose content was fsynced, under the names renames gave them since
    for index, event in enumerate(trace):
        if event[0] == "fsync":
            synced.add(event[1])
            continue
        _, source, target = event
        before = set(synced)
        synced |= {target + path[len(source):] for path in before if path == source or path.startswith(source + "/")}
        if not Path(target).is_relative_to(root):
            continue
        moved_aside = source in published or any(source.startswith(p + "/") for p in published)
        published.add(target)
        final = Path(target)
        if moved_aside or not final.exists():
            continue
        if final.is_dir():
            files = sorted(p.relative_to(final).as_posix() for p in final.rglob("*") if p.is_file())
            missing = [f for f in files if os.path.join(source, f) not in before]
            if missing:
                problems.append(f"{target}: published (renamed from {source}) before its files were fsynced: {missing}")
        elif source not in before:
            problems.append(f"{target}: renamed from {source} before that file was fsynced")
        if not any(e == ("fsync", str(final.parent)) for e in trace[index + 1:]):
            problems.append(f"{target}: its folder {final.parent} was not fsynced after the rename")
    return problems
