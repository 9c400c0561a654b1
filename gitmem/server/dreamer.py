"""The dreamer: runs dream jobs (docs/dreams.md) with a model, through the Anthropic Messages API
(or an OpenAI-compatible endpoint: :mod:`gitmem.server.dream_models`).

A dream is a conversation with a model that has Claude's memory tool (``memory_20250818``: view,
create, str_replace, insert, delete, rename) on one scope of a store, and a ``search_memories``
tool. The first message gives it the instructions, what the store holds and the versions each input
session wrote. Every tool call runs through :class:`gitmem.integrations.anthropic_tool.MemoryBackend`
on the public ``Store`` API, as the dream's own session (``sesn_...``) and actor
(``service:dreamer``): the same guard, limits and review rules as any other caller. The text the
model wrote beside a tool call is kept as that change's reasoning.

Where the writes go:

- ``create_new``: a new store copied from the input (``gitmem.store.copy_store``, history kept),
  written directly; the input is only read;
- ``update_existing`` with review (the default): the input store, in review mode: every change
  lands in the dream's proposal (``gitmem review``), never in the scope;
- ``update_existing`` without review (asked for explicitly): each change is published as its own
  version, and the dream lists which ones landed (unless the store's ``acl.review`` reviews the
  dreamer anyway).

Every read and write carries the dream's :class:`gitmem.model.caller.Caller` (its actor and
session, bound; read-write on the store it writes and nothing else, in its scope; review mode when
its changes go to a proposal), so the engine's access checks, guard, limits and review routing
decide as for any token. A cancel (or a server stopping) is seen within
:data:`POLL_SECONDS` even while a model request is in flight: the request is abandoned, the
writes made so far stay where they are. Reserved paths (short-term records, the SDK's marker)
are refused to the model (:func:`gitmem.server.dream_prompt.reserved`).

:class:`DreamRunner` runs jobs in a pool of ``GITMEM_DREAM_WORKERS`` threads (default 2), picks up
pending ones and fails orphaned running ones after a restart, and starts memory pipelines when due.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem import config
from gitmem.errors import ConfigError, ForbiddenError, GitmemError
from gitmem.ids import new_id
from gitmem.model.caller import Caller
from gitmem.server import dream_models, dream_prompt, dream_runs
from gitmem.server.dream_jobs import Dream, DreamJobs
from gitmem.store import Store, copy_store, open_store

if TYPE_CHECKING:
    from gitmem.server import dream_tools

log = logging.getLogger("gitmem.server")
WRITES = ("create", "str_replace", "insert", "delete", "rename")
PROVIDERS = ("anthropic", "openai")
POLL_SECONDS = 0.1  # how often a model call in flight looks for a cancel
MAX_CALLS = 50  # tool calls run per turn; more are answered with an error
MESSAGE_CHARS = 1000  # of a refusal's message kept in the record


class DreamStopped(Exception):
    """The dream was canceled, or its server is stopping."""


def settings() -> dict[str, Any]:
    """The dreamer's settings, from the environment (docs/dreams.md)."""
    return {
        "provider": config.env("GITMEM_DREAM_PROVIDER") or "anthropic",
        "base_url": config.env("GITMEM_DREAM_BASE_URL") or None,
        "api_key": config.env("GITMEM_DREAM_API_KEY") or config.env("ANTHROPIC_API_KEY") or None,
        "workers": int(config.env("GITMEM_DREAM_WORKERS") or "2"),
        "max_turns": int(config.env("GITMEM_DREAM_MAX_TURNS") or "40"),
        "tick_seconds": float(config.env("GITMEM_DREAM_TICK_SECONDS") or "30"),
        "timeout": float(config.env("GITMEM_DREAM_TIMEOUT") or "300"),
    }


class Dreamer:
    """One dream's run: the conversation with the model and the tool calls."""

    def __init__(
        self,
        jobs: DreamJobs,
        dream: Dream,
        client: Any,
        *,
        max_turns: int,
        stopping: threading.Event,
        provider: str = "anthropic",
    ):
        self.jobs = jobs
        self.dream = dream
        self.client = client
        self.provider = provider
        self.max_turns = max_turns
        self.stopping = stopping

    def _check(self) -> None:
        if self.jobs.cancel_requested(self.dream.id):
            raise DreamStopped("canceled")
        if self.stopping.is_set():
            raise DreamStopped("the server is stopping")

    def _save(self, change: Callable[[Dream], None]) -> None:
        self.dream = self.jobs.update(self.dream.id, change)

    def run(self, home: Path) -> None:
        d = self.dream
        assert d.session_id is not None
        with open_store(d.store, home) as source:
            if d.behavior == "create_new":
                name = _output_name(d, source.name)
                with copy_store(
                    source, name, description=f"dream {d.id} of {d.store_id}", home=home, actor=d.actor
                ) as out:
                    out_id, out_handle = out.settings.id, out.path.stem

                def set_output(x: Dream) -> None:
                    x.output, x.output_id = out_handle, out_id  # by handle: names may repeat

                self._save(set_output)
                with open_store(out_id, home) as target:
                    self._converse(source, target, self._caller(target, review=False))
            else:
                self._converse(source, source, self._caller(source, review=d.review))

    def _caller(self, target: Store, *, review: bool) -> Caller:
        """Who the dream is: its own actor and session (bound), read-only on its input, read-write
        on the store it writes, in its scope; in review mode when it asked for review or the
        store's ``acl.review`` reviews the dreamer (so that it reads its proposal back)."""
        d = self.dream
        review = review or target.review_owner(d.scope, d.actor, d.session_id) is not None
        return Caller(
            actor=d.actor,
            session=d.session_id,
            stores={d.store_id: "ro", target.settings.id: "rw"},
            scope=d.scope,
            review=review,
            rights=frozenset({"write"}),
            session_bound=True,
        )

    def _converse(self, source: Store, target: Store, caller: Caller) -> None:
        from gitmem.server import dream_tools  # the Anthropic SDK: imported when a dream runs, not at start

        d = self.dream
        backend = dream_tools.Backend(target, d.scope, caller)
        first = dream_prompt.first_message(
            source,
            d.scope,
            caller,
            label=d.store_id,
            sessions=d.sessions,
            instructions=d.instructions,
        )
        chat = dream_models.conversation(self.provider, self.client, d.model, first)
        for _turn in range(self.max_turns):
            self._check()
            turn = self._ask(chat)
            self._count(turn.usage)
            reasoning = dream_prompt.withheld(turn.reasoning, target)
            outputs = []
            for n, call in enumerate(turn.calls):
                self._check()
                if n >= MAX_CALLS:
                    outputs.append((call, f"Error: at most {MAX_CALLS} tool calls per turn", True))
                    continue
                text, is_error = self._tool(backend, call.name, call.input, reasoning)
                outputs.append((call, text, is_error))
            if turn.done:
                return
            chat.results(outputs)
        raise GitmemError(f"the dream used its {self.max_turns} turns without finishing")

    def _ask(self, chat: Any) -> dream_models.Turn:
        """One model turn, in a thread of its own: a cancel or a stop while it is in flight ends
        the dream within :data:`POLL_SECONDS`; the request is abandoned (its answer, if it comes,
        is dropped) and the client closed to let go of its connection."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def call() -> None:
            try:
                box["turn"] = chat.turn()
            except BaseException as exc:  # handed to the dream's thread below
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=call, name=f"gitmem-dream-model-{self.dream.id}", daemon=True).start()
        while not done.wait(POLL_SECONDS):
            try:
                self._check()
            except DreamStopped:
                _close(self.client)
                raise
        if "error" in box:
            raise box["error"]
        turn: dream_models.Turn = box["turn"]
        return turn

    def _count(self, usage: dict[str, int]) -> None:
        def change(x: Dream) -> None:
            x.turns += 1
            for key in x.usage:
                x.usage[key] += usage.get(key, 0)

        self._save(change)

    def _tool(self, backend: dream_tools.Backend, name: str, data: Any, reasoning: str) -> tuple[str, bool]:
        from anthropic.tools import ToolError

        from gitmem.server import dream_tools

        if not isinstance(data, dict):
            return "Error: the tool input must be an object", True
        if name == "search_memories":
            return dream_tools.search(backend, data), False
        if name != "memory":
            return f"Error: unknown tool {name!r}", True
        command = data.get("command")
        before = len(backend.versions)
        try:
            text = dream_tools.memory_command(backend, data)
        except ToolError as exc:
            message = str(exc)[:MESSAGE_CHARS]
            if command in WRITES:
                path = data.get("path") or data.get("old_path")
                # kept in the record and shown in the console: bounded, and what the guard
                # refuses (a secret in a path the model made up) withheld
                refused = {
                    "command": command,
                    "path": dream_prompt.withheld(path[:1024], backend.store)
                    if isinstance(path, str)
                    else None,
                    "message": dream_prompt.withheld(message, backend.store),
                    "reasoning": reasoning,
                }
                self._save(lambda x: x.refused.append(refused))
            return message, True
        except (KeyError, TypeError, ValueError) as exc:
            return f"Error: bad input for {command!r}: {exc}", True
        new = backend.versions[before:]
        if new:
            store = backend.store
            # Where the engine routed them: the caller's review mode, or the store's acl.review
            # (which may review the dreamer even when the dream asked for none: said so).
            caller = backend.caller
            assert caller is not None
            owner = store.review_owner(backend.scope, caller.actor, caller.session, review=caller.review)
            landed = owner is None
            proposal = store.open_proposal(backend.scope, owner, caller=caller) if owner else None
            entries = [
                {
                    "version_id": v.id,
                    "memory_id": v.memory_id,
                    "path": v.path,
                    "previous_path": v.previous_path,
                    "operation": v.operation,
                    "command": command,
                    "reasoning": reasoning,
                    "landed": landed,
                    # the proposal it was written into: another's acceptance never publishes it
                    "proposal_id": proposal.id if proposal is not None else None,
                }
                for v in new
            ]

            def change(x: Dream) -> None:
                x.changes.extend(entries)
                if proposal is not None:
                    x.proposal_id = proposal.id

            self._save(change)
        return text, False


def _close(client: Any) -> None:
    try:
        client.close()
    except Exception:  # pragma: no cover - closing is a courtesy to the abandoned request
        log.debug("closing a dream's model client failed", exc_info=True)


def _output_name(d: Dream, source_name: str) -> str:
    """The display name of a create_new dream's store (free text: its id is its own)."""
    return f"{source_name[:40]}-dream-{d.id[-10:].lower()}"


class DreamRunner:
    """Runs the dream jobs of a workspace with at most ``workers`` at a time."""

    def __init__(
        self,
        home: str | Path,
        *,
        workers: int | None = None,
        client: Callable[[], Any] | None = None,
        max_turns: int | None = None,
        tick_seconds: float | None = None,
    ) -> None:
        s = settings()
        self.home = Path(home)
        self.jobs = DreamJobs(self.home)
        self.workers = max(1, workers or s["workers"])
        self.max_turns = max_turns or s["max_turns"]
        self.tick_seconds = tick_seconds or s["tick_seconds"]
        if s["provider"] not in PROVIDERS:
            raise ConfigError(f"GITMEM_DREAM_PROVIDER: one of {', '.join(PROVIDERS)}, not {s['provider']!r}")
        self.provider = str(s["provider"])
        self.client = client or (
            lambda: dream_models.client(self.provider, s["base_url"], s["api_key"], timeout=s["timeout"])
        )
        self.stopping = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._ticker: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self, *, schedule: bool = True) -> None:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="gitmem-dream")
        if schedule:
            _RUNNERS[self.home.resolve()] = self
        failed, pending = self.jobs.recover()
        for dream_id in failed:
            log.warning("dream %s failed: its worker stopped before it ended", dream_id)
        for dream_id in pending:
            self.submit(dream_id)
        if schedule and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="gitmem-dream-schedule", daemon=True)
            self._ticker.start()

    def close(self) -> None:
        if _RUNNERS.get(self.home.resolve()) is self:
            del _RUNNERS[self.home.resolve()]
        self.stopping.set()
        if self._pool is not None:
            # Not waiting: a model call in flight may take minutes. Its dream stops after it (the
            # stop is checked before every step) and ends failed; if the process is gone first,
            # the next start finds it running without a worker and ends it failed then.
            self._pool.shutdown(wait=False, cancel_futures=True)

    def submit(self, dream_id: str) -> Future[None]:
        if self._pool is None:
            self.start(schedule=False)
        assert self._pool is not None
        return self._pool.submit(self.run, dream_id)

    # ------------------------------------------------------------------ one dream
    def run(self, dream_id: str) -> None:
        """Run one dream to its end (in the calling thread)."""
        with self.jobs.running(dream_id) as mine:
            if not mine:
                return  # another worker has it
            d = self.jobs.get(dream_id)
            if d.status != "pending":
                return

            def start(x: Dream) -> None:
                if x.status == "pending":
                    x.status = "running"
                    x.session_id = x.session_id or new_id("sesn")

            d = self.jobs.update(dream_id, start)
            if d.status != "running":
                return
            dreamer = Dreamer(
                self.jobs,
                d,
                self.client(),
                max_turns=self.max_turns,
                stopping=self.stopping,
                provider=self.provider,
            )
            outcome, error = "completed", None
            interrupted: BaseException | None = None
            try:
                dreamer.run(self.home)
            except DreamStopped as exc:
                outcome = "canceled" if str(exc) == "canceled" else "failed"
                if outcome == "failed":
                    error = {"type": "internal_error", "message": f"the dream stopped: {exc}"}
            except GitmemError as exc:
                outcome, error = "failed", {"type": exc.type_name, "message": exc.message}
            except Exception as exc:  # the model endpoint, the network: the dream fails, the server goes on
                log.exception("dream %s failed", dream_id)
                outcome = "failed"
                error = {"type": _api_error_type(exc), "message": f"{type(exc).__name__}: {exc}"[:2000]}
            except BaseException as exc:  # Ctrl-C in `gitmem dream run`: recorded, then passed on
                outcome, error = "failed", {"type": "internal_error", "message": "the dream was interrupted"}
                interrupted = exc

            def end(x: Dream) -> None:
                x.worker_stopped = True
                if x.status == "running":  # a cancel already ended it: canceled stays
                    x.status = outcome
                    x.error = error
                    x.ended_at = config.now_rfc3339()

            self.jobs.update(dream_id, end)
            if interrupted is not None:
                raise interrupted

    # ------------------------------------------------------------------ pipelines
    def _tick(self) -> None:
        while not self.stopping.wait(self.tick_seconds):
            try:
                self.run_due()
            except Exception:  # pragma: no cover - logged, the next tick tries again
                log.exception("memory pipelines: a scheduled run failed")

    def run_due(self, now: float | None = None) -> list[str]:
        """Start every pipeline whose schedule is due; returns the dreams started."""
        started = []
        now = time.time() if now is None else now
        for p in self.jobs.pipelines():
            if p.every_seconds <= 0:
                continue
            last = _epoch(p.last_run_at)
            if last is not None and now - last < p.every_seconds:
                continue
            try:  # asked in the name of whoever set the pipeline (dream_runs.trigger)
                d = dream_runs.trigger(self.jobs, self.home, p.store, trigger="schedule")
            except ForbiddenError as exc:  # its setter may no longer publish there: the others still run
                log.warning("memory pipeline of store %r: %s", p.store, exc.message)
                continue
            if d is not None:
                self.submit(d.id)
                started.append(d.id)
        return started


_RUNNERS: dict[Path, DreamRunner] = {}  # the started runner of each workspace served here


def runner_for(home: str | Path) -> DreamRunner | None:
    """The running server's runner of ``home`` in this process (the console hands it dreams)."""
    return _RUNNERS.get(Path(home).resolve())


def _epoch(value: str | None) -> float | None:
    import datetime as dt

    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _api_error_type(exc: Exception) -> str:
    name = type(exc).__name__
    if "Timeout" in name:
        return "timeout"
    if "RateLimit" in name:
        return "rate_limit_error"
    if "Authentication" in name or "PermissionDenied" in name:
        return "authentication_error"
    return "internal_error"
