"""The planners of the common writes, and their serializable form.

Each public write of :mod:`gitmem.engine.memories` (``write``, ``create``, ``str_replace``,
``insert``, ``delete``, ``rename``) checks its arguments, then builds its plan here. The same plan
can be rebuilt from a :data:`Spec` (the operation and its checked arguments), so that a write
queued by another process (gitmem.engine.xqueue) is planned by the group leader exactly as its
caller would have planned it; :func:`rebuild` checks a spec again as untrusted input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gitmem.engine.writer import Change, ScopeState, encode_content, sha256_hex
from gitmem.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PathConflictError,
    PreconditionFailedError,
)
from gitmem.ids import is_id, new_id
from gitmem.model.paths import validate_path

Plan = Callable[[ScopeState], Change | None]
#: A write in serializable form: the operation and its arguments (str, int, bytes or None).
Spec = tuple[str, dict[str, object]]


def check_sha(value: str | None) -> None:
    if value is not None and (len(value) != 64 or any(c not in "0123456789abcdef" for c in value)):
        raise InvalidInputError(f"if_sha256 {value!r} is not 64 lowercase hex characters")


def refuse_conflict(state: ScopeState, path: str, ignore: str | None = None) -> None:
    other = state.conflict(path, ignore)
    if other is None:
        return
    mid = state.memory_id_at(other) or ""
    if other == path:
        raise PathConflictError(f"{path} already exists in scope {state.scope!r}", other, mid)
    relation = "inside" if path.startswith(other + "/") else "a directory holding"
    raise PathConflictError(
        f"{path} conflicts with memory {other}: a memory cannot be {relation} another", other, mid
    )


def line_numbers(text: str, needle: str) -> list[int]:
    """1-based line numbers where each occurrence of ``needle`` starts."""
    out: list[int] = []
    start = 0
    while True:
        i = text.find(needle, start)
        if i < 0:
            return out
        out.append(text.count("\n", 0, i) + 1)
        start = i + 1


def insert_text(text: str, line: int, new: str) -> str:
    """``new`` inserted after line ``line`` of ``text`` (0: at the top)."""
    # Lines end at "\n" only (as in str_replace's line numbers), not at U+2028, \x0c, \x85...
    lines = [part + "\n" for part in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()
    if isinstance(line, bool) or not 0 <= line <= len(lines):
        raise InvalidInputError(f"invalid line {line}: it must be within [0, {len(lines)}]")
    if line > 0 and not lines[line - 1].endswith("\n"):
        lines[line - 1] += "\n"
    if not new.endswith("\n"):
        new += "\n"
    lines.insert(line, new)
    return "".join(lines)


# ---------------------------------------------------------------------- plans
def plan_write(path: str, data: bytes, if_sha256: str | None) -> Plan:
    def plan(state: ScopeState) -> Change | None:
        blob = state.blob(path)
        if blob is not None:
            if blob.data == data:
                return None
            if if_sha256 is not None and sha256_hex(blob.data) != if_sha256:
                raise PreconditionFailedError(
                    f"{path} changed: its sha256 is {sha256_hex(blob.data)}, not {if_sha256}"
                )
            return Change("modified", path, data, state.memory_id(path))
        if if_sha256 is not None:
            raise PreconditionFailedError(f"{path} does not exist, so it cannot match if_sha256")
        refuse_conflict(state, path)
        return Change("created", path, data, new_id("mem"))

    return plan


def plan_create(path: str, data: bytes, memory_id: str | None) -> Plan:
    def plan(state: ScopeState) -> Change:
        refuse_conflict(state, path)
        if memory_id is not None and state.has_live_memory(memory_id):
            raise ConflictError(f"memory {memory_id} is live in scope {state.scope!r}; it cannot be revived")
        return Change("created", path, data, memory_id or new_id("mem"))

    return plan


def plan_edit(path: str, edit: Callable[[str], str], if_sha256: str | None) -> Plan:
    def plan(state: ScopeState) -> Change | None:
        blob = state.require(path)
        if if_sha256 is not None and sha256_hex(blob.data) != if_sha256:
            raise PreconditionFailedError(
                f"{path} changed: its sha256 is {sha256_hex(blob.data)}, not {if_sha256}"
            )
        try:
            text = blob.data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(f"{path} is not UTF-8 text and cannot be edited") from None
        data = encode_content(edit(text))
        if data == blob.data:
            return None
        return Change("modified", path, data, state.memory_id(path))

    return plan


def replace_edit(path: str, old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        lines = line_numbers(text, old)
        if not lines:
            raise InvalidInputError(f"no replacement was made: the text was not found in {path}")
        if len(lines) > 1:
            where = ", ".join(map(str, lines))
            raise InvalidInputError(
                f"no replacement was made: the text occurs {len(lines)} times in {path} (lines {where}); "
                "give more context so that it is unique"
            )
        return text.replace(old, new, 1)

    return edit


def plan_delete(path: str, if_sha256: str | None) -> Plan:
    def plan(state: ScopeState) -> Change:
        blob = state.require(path)
        if if_sha256 is not None and sha256_hex(blob.data) != if_sha256:
            raise PreconditionFailedError(
                f"{path} changed: its sha256 is {sha256_hex(blob.data)}, not {if_sha256}; nothing was deleted"
            )
        return Change("deleted", path, None, state.memory_id(path))

    return plan


def plan_rename(old_path: str, new_path: str, if_sha256: str | None) -> Plan:
    def plan(state: ScopeState) -> Change | None:
        blob = state.blob(old_path)
        if blob is None:
            target = state.blob(new_path)
            if target is not None and if_sha256 is not None and sha256_hex(target.data) == if_sha256:
                return None  # already renamed: the requested state holds
            raise NotFoundError(f"memory {old_path} does not exist in scope {state.scope!r}")
        if if_sha256 is not None and sha256_hex(blob.data) != if_sha256:
            raise PreconditionFailedError(
                f"{old_path} changed: its sha256 is {sha256_hex(blob.data)}, not {if_sha256}"
            )
        if old_path == new_path:
            return None
        refuse_conflict(state, new_path, ignore=old_path)
        return Change("modified", new_path, blob.data, state.memory_id(old_path), previous_path=old_path)

    return plan


# ---------------------------------------------------------------------- rebuilding a spec
#: The arguments of each operation and their types (``None`` allowed where the tuple says so).
_ARGS: dict[str, dict[str, tuple[type, ...]]] = {
    "write": {"path": (str,), "data": (bytes,), "if_sha256": (str, type(None))},
    "create": {"path": (str,), "data": (bytes,), "memory_id": (str, type(None))},
    "str_replace": {"path": (str,), "old": (str,), "new": (str,), "if_sha256": (str, type(None))},
    "insert": {"path": (str,), "line": (int,), "text": (str,), "if_sha256": (str, type(None))},
    "delete": {"path": (str,), "if_sha256": (str, type(None))},
    "rename": {"old_path": (str,), "new_path": (str,), "if_sha256": (str, type(None))},
}
ERASING = frozenset({"delete"})  # operations an archived store still allows


def rebuild(op: object, args: object) -> tuple[Plan, bool]:
    """The plan of a write given in serializable form (from another process: untrusted), checked as
    the public function checks its arguments; and whether it only erases. InvalidInputError when
    the operation is unknown or an argument is missing, extra, of the wrong type or invalid."""
    if not isinstance(op, str) or op not in _ARGS:
        raise InvalidInputError(f"unknown queued operation {op!r}")
    if not isinstance(args, Mapping) or set(args) != set(_ARGS[op]):
        raise InvalidInputError(f"queued {op}: expected the arguments {sorted(_ARGS[op])}")
    for name, types in _ARGS[op].items():
        value = args[name]
        if not isinstance(value, types) or isinstance(value, bool):
            raise InvalidInputError(f"queued {op}: argument {name} has the wrong type")
    a = dict(args)
    for name in ("path", "old_path", "new_path"):
        if name in a:
            validate_path(str(a[name]))
    sha = a.get("if_sha256")
    check_sha(sha if isinstance(sha, str) else None)
    for name in ("old", "new", "text"):
        if name in a:
            encode_content(str(a[name]))  # lone surrogates are refused here, not later
    if op == "write":
        return plan_write(_s(a["path"]), _b(a["data"]), _o(a["if_sha256"])), False
    if op == "create":
        mid = _o(a["memory_id"])
        if mid is not None and not is_id(mid, "mem"):
            raise InvalidInputError(f"invalid memory id {mid!r}: expected mem_<ulid>")
        return plan_create(_s(a["path"]), _b(a["data"]), mid), False
    if op == "str_replace":
        if a["old"] == "":
            raise InvalidInputError("old text must not be empty")
        edit = replace_edit(_s(a["path"]), _s(a["old"]), _s(a["new"]))
        return plan_edit(_s(a["path"]), edit, _o(a["if_sha256"])), False
    if op == "insert":
        line, text = a["line"], _s(a["text"])
        assert isinstance(line, int)
        return plan_edit(_s(a["path"]), lambda t: insert_text(t, line, text), _o(a["if_sha256"])), False
    if op == "delete":
        return plan_delete(_s(a["path"]), _o(a["if_sha256"])), True
    return plan_rename(_s(a["old_path"]), _s(a["new_path"]), _o(a["if_sha256"])), False


def _s(value: object) -> str:
    assert isinstance(value, str)
    return value


def _b(value: object) -> bytes:
    assert isinstance(value, bytes)
    return value


def _o(value: object) -> str | None:
    assert value is None or isinstance(value, str)
    return value
