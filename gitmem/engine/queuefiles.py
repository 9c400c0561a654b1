"""The files of the cross-process write queue (gitmem.engine.xqueue): written atomically, read
as untrusted input, and the encoding of a write's arguments and of its answer."""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gitmem import errors
from gitmem.errors import GitmemError, InvalidInputError

if TYPE_CHECKING:
    from gitmem.model.versions import Version


class Answered(Protocol):
    """What :func:`result_of` reads of a finished request (gitmem.engine.xqueue.Request)."""

    @property
    def result(self) -> Version | None: ...

    @property
    def error(self) -> BaseException | None: ...


def ulid_ms(ulid: str) -> int:
    """The time (ms) in a ULID (checked by the name pattern)."""
    return int(ulid[:10].translate(_FROM_CROCKFORD), 32)


_FROM_CROCKFORD = str.maketrans("ABCDEFGHJKMNPQRSTVWXYZ", "ABCDEFGHIJKLMNOPQRSTUV")


def write_file(directory: Path, name: str, body: dict[str, object], *, keep: bool = False) -> int | None:
    """Write ``name`` atomically (a temporary file renamed into place, 0600); with ``keep``, the
    file stays open and its descriptor is returned."""
    tmp = os.path.join(directory, f".tmp-{name}")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        data = json.dumps(body, separators=(",", ":")).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        os.close(fd)
        raise
    if keep:
        return fd
    os.close(fd)
    return None


def read_json(path: Path | str, cap: int) -> dict[str, object] | None:
    """A JSON object from a regular file of at most ``cap`` bytes (no symlink followed), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return read_json_fd(fd, cap)
    finally:
        os.close(fd)


def read_json_fd(fd: int, cap: int) -> dict[str, object] | None:
    """:func:`read_json` of an open file (left open)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
        return None
    raw = os.pread(fd, st.st_size + 1, 0)
    if len(raw) > cap:
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OverflowError:
        return False
    return True


def encode_args(args: dict[str, object]) -> dict[str, object]:
    return {k: {"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v for k, v in args.items()}


def decode_args(args: object) -> object:
    if not isinstance(args, dict):
        return args
    out: dict[str, object] = {}
    for k, v in args.items():
        if isinstance(v, dict):
            if set(v) != {"b64"} or not isinstance(v["b64"], str):
                raise InvalidInputError(f"queued argument {k!r} is not text, a number or base64 bytes")
            try:
                v = base64.b64decode(v["b64"], validate=True)
            except binascii.Error:
                raise InvalidInputError(f"queued argument {k!r} is not valid base64") from None
        out[k] = v
    return out


def result_of(r: Answered) -> dict[str, object]:
    if r.error is not None:
        exc = r.error
        cls = type(exc) if isinstance(exc, GitmemError) else GitmemError
        out: dict[str, object] = {"class": cls.__name__, "message": str(exc), "exit_code": cls.exit_code}
        if isinstance(exc, errors.PathConflictError):
            out["path"], out["memory_id"] = exc.conflicting_path, exc.conflicting_memory_id
        return {"error": out}
    if r.result is None:
        return {"none": True}
    return {"version": r.result.id}


def error_of(info: dict[str, object]) -> GitmemError:
    """The error a leader answered with, as its class (GitmemError when the class is unknown)."""
    name, message = info.get("class"), str(info.get("message", ""))
    cls = getattr(errors, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, GitmemError)):
        return GitmemError(message)
    if issubclass(cls, errors.PathConflictError):
        return cls(message, str(info.get("path", "")), str(info.get("memory_id", "")))
    try:
        return cls(message)
    except TypeError:
        return GitmemError(message)
