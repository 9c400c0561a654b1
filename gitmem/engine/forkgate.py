"""The index write transactions open in this process, and a fork waiting for them (one gate a
process: gitmem.engine.index_db's transactions enter it)."""

from __future__ import annotations

import os
import threading


class ForkGate:
    """The index write transactions open in this process, and a fork waiting for them.

    SQLite keeps its file-lock state per process; a child forked while another thread of its
    parent has a write transaction open inherits that state and finds the index busy for good
    (every write in the child fails after the busy timeout). So a fork waits (up to
    ``FORK_WAIT`` seconds) until no transaction is open, and no new one starts until it is done.
    A transaction never waits for anything a forking thread holds (a staged record waits only for
    its flush), so the wait ends."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No transaction open, no fork waiting (a forked child has none of its parent's, nor its
        threads: it starts with a new condition)."""
        self.cond = threading.Condition(threading.Lock())
        self.open = 0
        self.forking = False

    def enter(self) -> None:
        with self.cond:
            while self.forking:
                self.cond.wait()
            self.open += 1

    def leave(self) -> None:
        with self.cond:
            self.open -= 1
            if self.open <= 0:
                self.cond.notify_all()

    def before_fork(self) -> None:
        with self.cond:
            self.forking = True
            self.cond.wait_for(lambda: self.open <= 0, FORK_WAIT)

    def after_fork_in_parent(self) -> None:
        with self.cond:
            self.forking = False
            self.cond.notify_all()


FORK_WAIT = 10.0
FORK_GATE = ForkGate()  # reset in place in a child: every module holding it sees the new state

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=lambda: FORK_GATE.before_fork(),
        after_in_parent=lambda: FORK_GATE.after_fork_in_parent(),
        after_in_child=lambda: FORK_GATE.reset(),
    )
