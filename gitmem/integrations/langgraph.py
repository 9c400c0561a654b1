"""A LangGraph long-term memory store (``BaseStore``) on one gitmem store and scope.

``GitmemStore(store, scope="main", prefix="/", actor=None, session=None)`` is a
``langgraph.store.base.BaseStore`` (extra ``gitmem-store[langgraph]``); pass it to
``graph.compile(store=...)`` and nodes get it as ``runtime.store``.

Layout: the item ``(namespace, key)`` is the memory ``<prefix><label>/.../<label>/<key>.json``, each
namespace label one path segment and the key the file name (characters a path may not hold, and
``%``, are percent-encoded: :mod:`gitmem.integrations.common`). The value is the file's content
as pretty JSON (two-space indent, the dict's own key order, non-ASCII kept as is, a final newline),
so ``gitmem read`` and ``git show`` print it readably and ``json.loads`` gives the value back.

Semantics follow LangGraph's own stores: in one ``batch`` every read (get, search, list) sees the
store as it was before the batch and the puts are applied afterwards, the last put of a
(namespace, key) winning; the puts are one gitmem batch (the branch moves once), one version per
changed item, tagged with ``actor`` and ``session`` (a new ``sesn_...`` when none is given).
Documented differences: see ``docs/integrations.md`` (TTL unsupported, search is full-text, a put
of an unchanged value writes no version and keeps ``updated_at``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from gitmem.errors import GuardRejectedError, IntegrityError, InvalidInputError, NotFoundError
from gitmem.integrations.common import (
    decode_segment,
    encode_segment,
    mask_findings,
    store_lock,
    valid_identity,
    valid_scope,
)
from gitmem.store import BatchOp, Memory, Store

__all__ = ["GitmemStore", "decode_value", "encode_value"]
log = logging.getLogger("gitmem.integrations.langgraph")
#: The key a stored value gets when the guard refused part of it: the rules that were masked.
MASKED_KEY = "gitmem_masked"

SUFFIX = ".json"
#: Search asks gitmem for at most this many hits before filtering and paging (gitmem's own cap).
MAX_SEARCH_HITS = 1000
_PUT_ATTEMPTS = 4


# ---------------------------------------------------------------------- the value file
def _plain(value: Any, where: str) -> Any:
    """``value`` as plain JSON types (tuples become lists), refusing what JSON cannot round-trip."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"value{where} is {value}: JSON has no NaN or infinity")
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidInputError(f"value{where} has the key {k!r}: JSON object keys are strings")
            out[k] = _plain(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise InvalidInputError(f"value{where} is a {type(value).__name__}, which is not JSON-serialisable")


def encode_value(value: Mapping[str, Any]) -> str:
    """A LangGraph value as the text of its memory file (pretty JSON and a final newline)."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"a LangGraph value must be a dict, not a {type(value).__name__}")
    plain = _plain(value, "")
    text = json.dumps(plain, indent=2, ensure_ascii=False) + "\n"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: \\u escapes keep it exactly
        text = json.dumps(plain, indent=2, ensure_ascii=True) + "\n"
    return text


def decode_value(text: str) -> dict[str, Any] | None:
    """The value stored as ``text``, or None when the file is not a JSON object."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# ---------------------------------------------------------------------- namespaces and paths
def _check_labels(namespace: tuple[str, ...], *, put: bool = False) -> None:
    if not isinstance(namespace, (tuple, list)):
        raise InvalidNamespaceError(f"A namespace must be a tuple of strings, not {namespace!r}")
    if put and not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    validate_op_namespace(GetOp(namespace, ""))
    if put and namespace[0] == "langgraph":
        raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {namespace}')


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidInputError(f"a LangGraph key must be a string, not {key!r}")
    return key


@dataclass(frozen=True)
class _Located:
    namespace: tuple[str, ...]
    key: str
    path: str


class _Layout:
    """Where items live under ``prefix`` and how paths map back to (namespace, key)."""

    def __init__(self, prefix: str) -> None:
        if not prefix.startswith("/") or not prefix.endswith("/"):
            raise InvalidInputError(f"invalid prefix {prefix!r}: it must start and end with '/'")
        self.prefix = prefix

    def directory(self, namespace: tuple[str, ...]) -> str:
        return self.prefix + "".join(encode_segment(label) + "/" for label in namespace)

    def path(self, namespace: tuple[str, ...], key: str) -> str:
        return self.directory(namespace) + encode_segment(key + SUFFIX)

    def locate(self, path: str) -> tuple[tuple[str, ...], str] | None:
        """(namespace, key) of an item file, or None for any other memory under the prefix."""
        if not path.startswith(self.prefix) or not path.endswith(SUFFIX):
            return None
        *dirs, name = path[len(self.prefix) :].split("/")
        labels = [decode_segment(d) for d in dirs]
        key = decode_segment(name)
        if not dirs or key is None or any(label is None for label in labels):
            return None
        namespace = tuple(label for label in labels if label is not None)
        try:
            _check_labels(namespace, put=True)
        except InvalidNamespaceError:
            return None
        return namespace, key[: -len(SUFFIX)]


# ---------------------------------------------------------------------- filters (LangGraph's operators)
def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"Unsupported operator: {op}")
    try:
        left, right = float(value), float(operand)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field matches no comparison
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[op]


def matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics: nested dicts match field by field, ``{"$op": x}`` compares,
    lists match element-wise, anything else by equality."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(value, k, v) for k, v in wanted.items())
        return isinstance(value, dict) and all(matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(value, list)
            and len(value) == len(wanted)
            and all(matches(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _condition_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    pattern = tuple(condition.path)
    if len(namespace) < len(pattern):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, pattern, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(pattern), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or label == p for label, p in pairs)


def _check_window(limit: int, offset: int) -> None:
    for name, n in (("limit", limit), ("offset", offset)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidInputError(f"invalid {name} {n!r}: use an integer >= 0")


# ---------------------------------------------------------------------- the store
class GitmemStore(BaseStore):
    """LangGraph's ``BaseStore`` over one gitmem store and scope.

    Args:
        store: an open gitmem store. Adapters sharing this ``Store`` object take turns on it;
            other code using it from other threads should open its own (``gitmem.open_store``).
        scope: the scope (branch) holding the items.
        prefix: the directory under which namespaces live (``/`` or e.g. ``/langgraph/``).
        actor: recorded on every version (``user:...``, ``service:...``); default from the session.
        session: recorded on every version; default a new ``sesn_...`` id.

    TTL is not supported (``supports_ttl`` is False): ``put(..., ttl=...)`` and a ``PutOp`` with a
    ``ttl`` raise ``NotImplementedError``; use the store's retention settings to expire history.
    """

    supports_ttl = False

    def __init__(
        self,
        store: Store,
        *,
        scope: str = "main",
        prefix: str = "/",
        actor: str | None = None,
        session: str | None = None,
        index: Mapping[str, Any] | bool | None = None,
    ) -> None:
        self.store = store
        self.scope = valid_scope(scope)
        # LangGraph's ``index=`` (an IndexConfig) turns on search by meaning: gitmem's hybrid mode with
        # its bundled model (docs/search.md); its ``embed``/``dims`` are not used, ``fields`` neither:
        # the whole item is embedded. Without it, search is full-text.
        self.search_mode = "hybrid" if index else "lexical"
        self.layout = _Layout(prefix)
        self.actor, self.session = valid_identity(actor, session)
        self._lock = store_lock(store)
        #: (namespace, key, rules) of every put the guard refused, stored with the secret masked
        self.masked: list[tuple[tuple[str, ...], str, list[str]]] = []

    # -------------------------------------------------------------- batch
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``: reads against the state before the batch, then the puts as one gitmem batch."""
        op_list = list(ops)
        puts: dict[str, tuple[PutOp, str | None]] = {}
        for op in op_list:
            self._check(op, puts)
        with self._lock:
            results = [None if isinstance(op, PutOp) else self._read(op) for op in op_list]
            if puts:
                self._apply(puts)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _check(self, op: Op, puts: dict[str, tuple[PutOp, str | None]]) -> None:
        """Refuse a bad op before anything is read or written."""
        if isinstance(op, (GetOp, PutOp)):
            _check_labels(op.namespace, put=isinstance(op, PutOp))
            _check_key(op.key)
        if isinstance(op, PutOp):
            if op.ttl is not None:
                raise NotImplementedError(
                    f"TTL is not supported by {type(self).__name__}. "
                    "Use a store implementation that supports TTL or set ttl=None."
                )
            text = None if op.value is None else encode_value(op.value)
            path = self.layout.path(tuple(op.namespace), op.key)
            puts.pop(path, None)  # the last put of an item wins, in its own position
            puts[path] = (op, text)
        elif isinstance(op, SearchOp):
            _check_labels(op.namespace_prefix)
            _check_window(op.limit, op.offset)
        elif isinstance(op, ListNamespacesOp):
            validate_op_namespace(op)
            _check_window(op.limit, op.offset)
            if op.max_depth is not None:
                _check_window(op.max_depth, 0)
        elif not isinstance(op, GetOp):
            raise ValueError(f"Unknown operation type: {type(op)}")

    def _read(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(tuple(op.namespace), op.key)
        if isinstance(op, SearchOp):
            return self._search(op)
        assert isinstance(op, ListNamespacesOp)
        return self._list_namespaces(op)

    # -------------------------------------------------------------- reads
    def _memory(self, path: str) -> Memory | None:
        try:
            return self.store.read(path, scope=self.scope)
        except NotFoundError:
            return None

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        if not namespace:
            return None  # puts never use the empty namespace
        memory = self._memory(self.layout.path(namespace, key))
        value = decode_value(memory.content or "") if memory is not None else None
        if memory is None or value is None:
            return None
        return Item(
            value=value,
            key=key,
            namespace=namespace,
            created_at=_time(memory.created_at),
            updated_at=_time(memory.updated_at),
        )

    def _items(self, namespace_prefix: tuple[str, ...]) -> list[_Located]:
        """Every item file under the namespace prefix, newest first (then by path)."""
        listed = self.store.list(self.layout.directory(namespace_prefix), scope=self.scope)
        memories = sorted((m for m in listed if isinstance(m, Memory)), key=lambda m: m.path)
        memories.sort(key=lambda m: _time(m.updated_at), reverse=True)
        out = []
        for memory in memories:
            located = self.layout.locate(memory.path)
            if located is not None:
                out.append(_Located(located[0], located[1], memory.path))
        return out

    def _query_hits(self, namespace_prefix: tuple[str, ...], query: str) -> list[tuple[_Located, float]]:
        directory = self.layout.directory(namespace_prefix)
        hits = self.store.search(
            query, scope=self.scope, limit=MAX_SEARCH_HITS, path_prefix=directory, mode=self.search_mode
        )
        out = []
        for hit in hits:
            located = self.layout.locate(hit.path)
            if located is not None:
                out.append((_Located(located[0], located[1], hit.path), hit.score))
        return out

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit == 0:
            return []
        candidates: list[tuple[_Located, float | None]]
        if op.query:
            candidates = list(self._query_hits(op.namespace_prefix, op.query))
        else:
            candidates = [(located, None) for located in self._items(op.namespace_prefix)]
        out: list[SearchItem] = []
        skipped = 0
        for located, score in candidates:
            memory = self._memory(located.path)
            value = decode_value(memory.content or "") if memory is not None else None
            if memory is None or value is None or (op.filter and not matches(value, op.filter)):
                continue  # not an item (another kind of file), or filtered out
            if skipped < op.offset:
                skipped += 1
                continue
            out.append(
                SearchItem(
                    namespace=located.namespace,
                    key=located.key,
                    value=value,
                    created_at=_time(memory.created_at),
                    updated_at=_time(memory.updated_at),
                    score=score,
                )
            )
            if len(out) == op.limit:
                break
        return out

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = {located.namespace for located in self._items(())}
        for condition in op.match_conditions or ():
            namespaces = {ns for ns in namespaces if _condition_matches(condition, ns)}
        if op.max_depth is not None:
            namespaces = {ns[: op.max_depth] for ns in namespaces}
        return sorted(namespaces)[op.offset : op.offset + op.limit]

    # -------------------------------------------------------------- writes
    def _apply(self, puts: dict[str, tuple[PutOp, str | None]]) -> None:
        for attempt in range(_PUT_ATTEMPTS):
            ops = [
                BatchOp("write", path, text) if text is not None else BatchOp("delete", path)
                for path, (_op, text) in puts.items()
                if text is not None or self._memory(path) is not None
            ]
            try:
                _apply_batch(self.store, ops, self.scope, self.actor, self.session)
                return
            except GuardRejectedError as exc:
                # A secret in a value: stored masked, flagged in the value, reported (docs/access.md)
                if not self._mask(puts, exc) or attempt == _PUT_ATTEMPTS - 1:
                    raise
            except NotFoundError:
                # Someone else deleted an item this batch deletes, after we looked: look again.
                if attempt == _PUT_ATTEMPTS - 1:
                    raise

    def _mask(self, puts: dict[str, tuple[PutOp, str | None]], exc: GuardRejectedError) -> bool:
        """Mask what the guard refused in the put it names; False when none can be masked."""
        for path, (op, text) in puts.items():
            if text is None or not exc.message.startswith(f"{path}: "):
                continue
            masked, rules = mask_findings(text, exc.findings)
            value = decode_value(masked)
            if not rules or value is None:
                return False
            value[MASKED_KEY] = sorted(set(value.get(MASKED_KEY) or []) | set(rules))
            puts[path] = (op, encode_value(value))
            self.masked.append((op.namespace, op.key, rules))
            log.warning("%s: the guard refused %s; stored with it masked", path, ", ".join(rules))
            return True
        return False

    def __repr__(self) -> str:
        return f"GitmemStore({self.store!r}, scope={self.scope!r}, prefix={self.layout.prefix!r})"


def _time(value: dt.datetime | None) -> dt.datetime:
    if value is None:  # a memory the index has not recorded yet; read() and list() never give one
        raise IntegrityError("a memory has no version time in the index: run `gitmem reindex`")
    return value


# ---------------------------------------------------------------------- gitmem internals, kept in one place
def _apply_batch(store: Store, ops: list[Any], scope: str, actor: str | None, session: str) -> None:
    if ops:
        store.batch(ops, scope=scope, actor=actor, session=session)
