"""A LangGraph checkpointer (``BaseCheckpointSaver``) on one gitmem store and scope.

``GitmemSaver(store, scope="main", actor=None, session=None)``; pass it to
``graph.compile(checkpointer=...)``. Short-term memory of a graph: every checkpoint and every set
of pending writes is one gitmem batch (one move of the branch), so LangGraph's time travel
(``graph.get_state_history``) shows the states ``gitmem log`` lists, and a fork by
``checkpoint_ns`` or by resuming from an older ``checkpoint_id`` is a new record beside the others.

Layout under ``/checkpoints/`` (docs/conversations.md; each name percent-encoded as in
:mod:`gitmem.integrations.common`, thread and namespace behind an ``@`` so that the root namespace
``""`` has a name)::

    /checkpoints/@<thread>/@<ns>/checkpoints/<checkpoint id>.json      checkpoint, metadata, parent
    /checkpoints/@<thread>/@<ns>/blobs/<channel>/<version>.json        a channel's value at a version
    /checkpoints/@<thread>/@<ns>/writes/<checkpoint id>/<task>~<idx>.json  one pending write

Values go through the saver's serde (``dumps_typed``); its bytes are kept as UTF-8 text with every
byte outside printable ASCII, and ``%``, percent-encoded, so that text in the state stays readable
and the store's guard sees it (a state holding a secret is refused, with the guard's error).
"""

from __future__ import annotations

import asyncio
import builtins
import json
import random
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any
from urllib.parse import quote_from_bytes, unquote_to_bytes

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from gitmem.errors import IntegrityError, InvalidInputError
from gitmem.integrations.common import decode_segment, encode_segment, store_lock, valid_identity, valid_scope
from gitmem.model.reserved import CHECKPOINTS
from gitmem.store import BatchOp, Store, record_base_path, record_replace_ops, record_write_ops

__all__ = ["GitmemSaver"]

_SAFE = bytes(c for c in range(0x20, 0x7F) if c != ord("%"))
_CHECKPOINT_FILE = re.compile(r"^/checkpoints/@([^/]*)/@([^/]*)/checkpoints/([^/]+)\.json\Z")


def _seg(text: str) -> str:
    return "@" + encode_segment(text)


def _typed(value: tuple[str, bytes]) -> dict[str, str]:
    kind, data = value
    return {"type": kind, "data": quote_from_bytes(data, safe=_SAFE)}


def _untyped(value: dict[str, str]) -> tuple[str, bytes]:
    return value["type"], unquote_to_bytes(value["data"])


def _text(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, sort_keys=True, indent=1) + "\n"


class GitmemSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints as versions of a gitmem store, in one scope."""

    def __init__(
        self,
        store: Store,
        *,
        scope: str = "main",
        actor: str | None = None,
        session: str | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self.scope = valid_scope(scope)
        self.actor, self.session = valid_identity(actor, session)
        self._lock = store_lock(store)

    # ------------------------------------------------------------------ paths
    @staticmethod
    def _dir(thread_id: str, ns: str) -> str:
        return f"{CHECKPOINTS}{_seg(str(thread_id))}/{_seg(ns)}/"

    def _checkpoint_path(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        return f"{self._dir(thread_id, ns)}checkpoints/{encode_segment(checkpoint_id)}.json"

    def _blob_path(self, thread_id: str, ns: str, channel: str, version: Any) -> str:
        return (
            f"{self._dir(thread_id, ns)}blobs/{encode_segment(channel)}/{encode_segment(str(version))}.json"
        )

    def _writes_dir(self, thread_id: str, ns: str, checkpoint_id: str) -> str:
        return f"{self._dir(thread_id, ns)}writes/{encode_segment(checkpoint_id)}/"

    def _limit(self) -> int:
        return self.store.settings.limits.max_memory_bytes

    def _commit(self, ops: list[BatchOp]) -> None:
        if ops:
            self.store.batch(list(ops), scope=self.scope, actor=self.actor, session=self.session)

    # ------------------------------------------------------------------ reading
    def _checkpoint_ids(self, thread_id: str, ns: str) -> list[str]:
        prefix = f"{self._dir(thread_id, ns)}checkpoints/"
        ids = {
            record_base_path(p)[len(prefix) : -len(".json")]
            for p in self.store.record_paths(prefix, scope=self.scope)
        }
        return sorted((d for i in ids if (d := decode_segment(i)) is not None), reverse=True)

    def _record(self, path: str) -> dict[str, Any] | None:
        rec = self.store.record(path, scope=self.scope)
        if rec is None:
            return None
        try:
            data = json.loads(rec.text)
        except ValueError:
            raise IntegrityError(f"{path} in scope {self.scope!r} is not a checkpoint record") from None
        if not isinstance(data, dict):
            raise IntegrityError(f"{path} in scope {self.scope!r} is not a checkpoint record")
        return data

    def _writes(self, thread_id: str, ns: str, checkpoint_id: str) -> list[tuple[str, str, Any]]:
        prefix = self._writes_dir(thread_id, ns, checkpoint_id)
        found = []
        for rec in self.store.records(prefix, scope=self.scope):
            w = json.loads(rec.text)
            found.append((w["task_path"], w["task_id"], int(w["idx"]), w["channel"], w["value"]))
        found.sort(key=lambda w: (w[0], w[1], w[2]))
        return [(task, channel, self.serde.loads_typed(_untyped(v))) for _p, task, _i, channel, v in found]

    def _tuple(self, thread_id: str, ns: str, checkpoint_id: str, data: dict[str, Any]) -> CheckpointTuple:
        checkpoint: Checkpoint = self.serde.loads_typed(_untyped(data["checkpoint"]))
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            blob = self._record(self._blob_path(thread_id, ns, channel, version))
            if blob is not None and blob["value"]["type"] != "empty":
                values[channel] = self.serde.loads_typed(_untyped(blob["value"]))
        parent = data.get("parent")
        return CheckpointTuple(
            config={
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
            },
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self.serde.loads_typed(_untyped(data["metadata"])),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=self._writes(thread_id, ns, checkpoint_id),
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        with self._lock:
            checkpoint_id = get_checkpoint_id(config)
            if not checkpoint_id:
                ids = self._checkpoint_ids(thread_id, ns)
                if not ids:
                    return None
                checkpoint_id = ids[0]
            data = self._record(self._checkpoint_path(thread_id, ns, checkpoint_id))
            return None if data is None else self._tuple(thread_id, ns, checkpoint_id, data)

    def _all_checkpoints(self) -> list[tuple[str, str, str]]:
        """(thread, ns, checkpoint id) of every checkpoint in the scope."""
        out = []
        for path in self.store.record_paths(CHECKPOINTS, scope=self.scope):
            m = _CHECKPOINT_FILE.match(record_base_path(path))
            if m is None:
                continue
            parts = [decode_segment(m.group(n)) for n in (1, 2, 3)]
            if None not in parts:
                out.append((str(parts[0]), str(parts[1]), str(parts[2])))
        return sorted(set(out))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        with self._lock:
            found = self._list(config, filter, before, limit)
        yield from found

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        want_thread = str(conf["thread_id"]) if conf.get("thread_id") is not None else None
        want_ns = conf.get("checkpoint_ns")
        want_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        if want_thread is not None and want_ns is not None:
            keys = [(want_thread, want_ns, c) for c in self._checkpoint_ids(want_thread, want_ns)]
        else:
            keys = [
                k
                for k in self._all_checkpoints()
                if (want_thread is None or k[0] == want_thread) and (want_ns is None or k[1] == want_ns)
            ]
        # Newest first within a namespace, as LangGraph's own savers list them.
        keys.sort(key=lambda k: (k[0], k[1], k[2]), reverse=True)
        out: builtins.list[CheckpointTuple] = []
        for thread_id, ns, checkpoint_id in keys:
            if want_id and checkpoint_id != want_id:
                continue
            if before_id and checkpoint_id >= before_id:
                continue
            if limit is not None and len(out) >= limit:
                break
            data = self._record(self._checkpoint_path(thread_id, ns, checkpoint_id))
            if data is None:
                continue
            if filter:
                metadata = self.serde.loads_typed(_untyped(data["metadata"]))
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            out.append(self._tuple(thread_id, ns, checkpoint_id, data))
        return out

    # ------------------------------------------------------------------ writing
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        c = checkpoint.copy()
        values: dict[str, Any] = c.pop("channel_values")  # type: ignore[misc]
        limit = self._limit()
        ops: list[BatchOp] = []
        for channel, version in new_versions.items():
            typed = self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
            blob = {"channel": channel, "version": str(version), "value": _typed(typed)}
            ops += record_write_ops(
                self._blob_path(thread_id, ns, channel, version), _text(blob), limit, op="write"
            )
        record = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent": conf.get("checkpoint_id"),
            "checkpoint": _typed(self.serde.dumps_typed(c)),
            "metadata": _typed(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
        }
        path = self._checkpoint_path(thread_id, ns, checkpoint["id"])
        with self._lock:
            old = self.store.record(path, scope=self.scope)
            if old is not None:
                ops += record_replace_ops(old, _text(record), limit)
            else:
                ops += record_write_ops(path, _text(record), limit, op="write")
            self._commit(ops)
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        checkpoint_id = conf["checkpoint_id"]
        prefix = self._writes_dir(thread_id, ns, checkpoint_id)
        limit = self._limit()
        with self._lock:
            existing = {record_base_path(p) for p in self.store.record_paths(prefix, scope=self.scope)}
            ops: list[BatchOp] = []
            for n, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, n)
                path = f"{prefix}{encode_segment(task_id)}~{idx}.json"
                if idx >= 0 and path in existing:
                    continue  # a regular write is kept as first saved; special ones are replaced
                record = {
                    "task_id": task_id,
                    "task_path": task_path,
                    "idx": idx,
                    "channel": channel,
                    "value": _typed(self.serde.dumps_typed(value)),
                }
                if path in existing:
                    old = self.store.record(path, scope=self.scope)
                    if old is not None:
                        ops += record_replace_ops(old, _text(record), limit)
                        continue
                ops += record_write_ops(path, _text(record), limit, op="write")
            self._commit(ops)

    def delete_thread(self, thread_id: str) -> None:
        prefix = f"{CHECKPOINTS}{_seg(str(thread_id))}/"
        with self._lock:
            paths = self.store.record_paths(prefix, scope=self.scope)
            self._commit([BatchOp("delete", p) for p in paths])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Every record of one thread (all namespaces, checkpoints, blobs and writes) copied to
        another, as one batch; a target with records of its own is refused."""
        src = f"{CHECKPOINTS}{_seg(str(source_thread_id))}/"
        dst = f"{CHECKPOINTS}{_seg(str(target_thread_id))}/"
        with self._lock:
            if self.store.record_paths(dst, scope=self.scope):
                raise InvalidInputError(
                    f"thread {target_thread_id!r} already has checkpoints: not copied onto"
                )
            ops: list[BatchOp] = []
            for rec in self.store.records(src, scope=self.scope):
                data = json.loads(rec.text)
                if isinstance(data, dict) and "thread_id" in data:
                    data["thread_id"] = str(target_thread_id)
                ops += record_write_ops(dst + rec.path[len(src) :], _text(data), self._limit(), op="write")
            self._commit(ops)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    def get_next_version(self, current: str | None, channel: None) -> str:
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # ------------------------------------------------------------------ async (a worker thread each)
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)
