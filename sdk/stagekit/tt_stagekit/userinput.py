"""Reading files and JSON a user supplied, refusing what would hang, crash or be silently misread. Stdlib only.

- `open_regular(path)`: a regular file only. A FIFO, device, socket or folder
  is refused from `stat` *before* it is opened (opening a FIFO blocks until a
  writer comes, reading /dev/zero never ends), and the opened descriptor is
  checked again (`fstat`), so a file swapped for a FIFO in between is refused
  too. Too-long names and other OS errors become one readable `InputFileError`.
- `loads(text)`: `json.loads` plus what it lets through or turns into a crash:
  duplicate keys (the last would silently win) are refused naming the dotted
  key, integers over Python's 4300-digit conversion limit and nesting deeper
  than `MAX_DEPTH` are refused instead of raising `ValueError`/`RecursionError`
  from deep inside the parser. Every refusal is a `JSONInputError` (a
  `ValueError`) with `loc` (dotted path, "" for the whole text) and, for
  syntax errors, `line`/`col` (the message itself never repeats them).

The host (spec files, general-regression sets), the engines' dataset readers
and the server's request parser all use these, so they refuse the same input
the same way.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any, BinaryIO, Optional

MAX_DEPTH = 64
MAX_INT_DIGITS = 4300  # Python's default int_max_str_digits: int() of a longer string raises ValueError
# Read whole, so capped: a larger (or sparse) file is refused naming its size instead of raising MemoryError.
MAX_DATASET_BYTES = 2 << 30  # a JSONL dataset read into memory (general-regression set, prebuilt rows, SFT rows)
MAX_SPEC_BYTES = 64 << 20  # a spec file


class InputFileError(ValueError):
    """A path that is not a readable regular file; the message starts with the path."""

    missing = False  # True when nothing exists at the path


class JSONInputError(ValueError):
    """JSON refused: `loc` is the dotted key path ("" for the text as a whole)."""

    def __init__(self, message: str, loc: str = "", line: Optional[int] = None, col: Optional[int] = None):
        super().__init__(message)
        self.loc, self.line, self.col = loc, line, col

    def located(self) -> str:
        """The message with its key path (`at echo.steps: ...`) when it has one."""
        return f"at {self.loc}: {self}" if self.loc else str(self)


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(mode: int) -> Optional[str]:
    """What a non-regular file is ("a named pipe (FIFO)", ...), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def os_reason(exc: OSError) -> str:
    """A short reason for an OS error on a path a user gave."""
    if exc.errno == errno.ENAMETOOLONG:
        return "the name is too long for the filesystem"
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a folder"
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def open_regular(path: Any) -> BinaryIO:
    """Open a regular file for binary reading; anything else raises `InputFileError` without blocking."""
    try:
        kind = special_kind(os.stat(path).st_mode)
        if kind is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            kind = special_kind(os.fstat(fd).st_mode)
            if kind is None:
                return os.fdopen(fd, "rb")
            os.close(fd)
    except OSError as exc:
        error = InputFileError(f"{path}: cannot read: {os_reason(exc)}")
        error.missing = exc.errno == errno.ENOENT
        raise error from None
    raise InputFileError(f"{path} is {kind}, not a regular file; give the path of a file")


def read_regular(path: Any, limit: int = MAX_DATASET_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (InputFileError naming the size otherwise; the
    file is never read past the limit, whatever its size says)."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise InputFileError(f"{path} is {max(size, len(data)):,} bytes, over the {limit:,}-byte limit tt reads "
                             "into memory; split it into smaller files or point at the right file")
    return data


class _Duplicated(dict):
    """An object in which a key appeared twice (found and reported after parsing, with its path)."""

    duplicate: str = ""


class _LongInt:
    def __init__(self, digits: int):
        self.digits = digits


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            marked = _Duplicated(pairs)
            marked.duplicate = key
            return marked
        out[key] = value
    return out


def _int(text: str) -> Any:
    digits = len(text.lstrip("-"))
    return _LongInt(digits) if digits > MAX_INT_DIGITS else int(text)


def _join(loc: str, key: Any) -> str:
    return f"{loc}.{key}" if loc else str(key)


def _check(value: Any, max_depth: int) -> None:
    """Walk the parsed value (iteratively): too deep, duplicated keys, too-long integers."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, loc, depth = stack.pop()
        if isinstance(item, _LongInt):
            raise JSONInputError(f"an integer of {item.digits} digits; numbers this long are refused", loc)
        if not isinstance(item, (dict, list)):
            continue
        if depth >= max_depth:  # named by its top-level key: the full path would be max_depth parts long
            raise JSONInputError(f"nested deeper than {max_depth} levels", loc.split(".")[0])
        if isinstance(item, _Duplicated):
            key = _join(loc, item.duplicate)
            raise JSONInputError(f"duplicate key {item.duplicate!r}: it appears more than once in the same object; "
                                 "keep one", key)
        children = item.items() if isinstance(item, dict) else enumerate(item)
        stack.extend((child, _join(loc, key), depth + 1) for key, child in children)


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON; anything refused raises `JSONInputError` (never `RecursionError` or a bare `ValueError`)."""
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise JSONInputError(f"invalid JSON: {exc.msg}", line=exc.lineno, col=exc.colno) from None
    except UnicodeDecodeError as exc:
        raise JSONInputError(f"not UTF-8: undecodable byte at offset {exc.start}") from None
    except RecursionError:
        raise JSONInputError(f"nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # a number json could not convert
        raise JSONInputError(f"invalid number: {str(exc).split(';')[0]}") from None
    _check(value, max_depth)
    return value

