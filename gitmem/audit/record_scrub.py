"""A redaction's (and a proposal erasure's) step for the records gitmem keeps beside history
(docs/redaction.md, "What erasure reaches"): what they quote of the erased content or path is
scrubbed, keeping who did what and when.

- **Proposal records** (``$GIT_DIR/gitmem/proposals/<id>.json``): a pattern's match in a
  decision's paths becomes ``redacted-<id>`` segment by segment, as in the rewritten chains' trees
  (so the decided paths still name what the chain touches), and in its reason ``[redacted: <id>]``.
- **Dream records** (gitmem.engine.dream_records: the workspace's ``<home>/dreams/<id>.json`` and
  the copies in ``$GIT_DIR/gitmem/dreams/``): a change naming a redacted (or erased) version has its
  path null, as a webhook event read after the redaction has (gitmem.engine.events); a pattern's
  match is replaced by ``[redacted: <id>]`` in every text the record keeps (reasoning, refusals,
  instructions, errors); the reasoning of a change whose version was redacted by id, or erased,
  becomes that mark (it may quote what no pattern names).

Every step is idempotent, and rewrites a record only when something in it changes. A redaction
runs it as a step of its rewrite's finish (gitmem.audit.journal, step 6), so the recovery of a
redaction killed past its branch swap scrubs the records too, from what its journal carries.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from gitmem.audit.redaction_plan import placeholder, redact_path
from gitmem.engine import dream_records
from gitmem.engine import proposals as P
from gitmem.engine.core import StoreCore
from gitmem.git.locks import proposals_lock

_log = logging.getLogger("gitmem.redact")


def scrub_redaction(
    store: StoreCore,
    redaction_id: str,
    scopes: Iterable[str],
    versions: Iterable[str],
    regex: re.Pattern[str] | None,
) -> int:
    """The redaction ``redaction_id`` of ``versions`` in ``scopes`` (by a pattern when ``regex``
    is given) in the store's proposal records (of those scopes, whose chains it rewrote) and dream
    records; how many records were rewritten."""
    mark = placeholder(redaction_id).decode()
    n = _proposals(store, set(scopes), redaction_id, regex, mark) if regex is not None else 0
    redacted = set(versions)
    return n + dream_records.rewrite_records(
        store.path, store.settings.id, lambda d: scrub_dream(d, redacted, regex, mark, redaction_id)
    )


def scrub_journaled(
    store: StoreCore,
    redaction_id: str,
    scopes: Iterable[str],
    versions: Iterable[str],
    pattern: str | None,
    *,
    pattern_known: bool = True,
) -> int:
    """:func:`scrub_redaction` from a rewrite's journal (``pattern``: a pattern redaction's regex).

    ``pattern_known`` off: the journal of a pattern redaction that an older gitmem wrote, which did
    not carry its pattern. Its records are scrubbed by version only (a dream's change naming one of
    its versions loses its path and reasoning); its matches elsewhere in dream and proposal records
    are left, and a warning says so (docs/redaction.md, "What erasure reaches")."""
    if not pattern_known:
        _log.warning(
            "redaction %s was recovered from a journal without its pattern (an older gitmem's): "
            "dream and proposal records were scrubbed of its versions only, not of its matches",
            redaction_id,
        )
    regex = re.compile(pattern) if pattern is not None else None
    return scrub_redaction(store, redaction_id, scopes, versions, regex)


def scrub_erasure(store: StoreCore, erasure_id: str, versions: Iterable[str]) -> int:
    """The erasure ``erasure_id`` of a proposal's ``versions`` in the store's dream records."""
    erased = set(versions)
    if not erased:
        return 0
    mark = placeholder(erasure_id).decode()
    return dream_records.rewrite_records(
        store.path, store.settings.id, lambda d: scrub_dream(d, erased, None, mark, erasure_id)
    )


def _proposals(store: StoreCore, scopes: set[str], rid: str, regex: re.Pattern[str], mark: str) -> int:
    changed = 0
    with proposals_lock(store.path):  # decisions and chain moves take it too
        for p in (p for p in P.proposals(store) if p.scope in scopes):
            before = p.to_dict()
            for d in p.decisions:
                d.paths = sorted(redact_path(regex, path, rid) for path in d.paths)
                d.reason = regex.sub(mark, d.reason)
            if p.to_dict() != before:
                P.save(store, p)
                changed += 1
    return changed


def scrub_dream(
    data: dict[str, Any], versions: set[str], regex: re.Pattern[str] | None, mark: str, rid: str
) -> bool:
    """Scrub one dream record in place (module docstring); True when it changed."""
    before = repr(data)

    def text(value: Any) -> Any:
        return regex.sub(mark, value) if regex is not None and isinstance(value, str) else value

    def path(value: Any) -> Any:
        return redact_path(regex, value, rid) if regex is not None and isinstance(value, str) else value

    def put(record: dict[str, Any], key: str, how: Any) -> None:
        if key in record:
            record[key] = how(record[key])

    for change in data.get("changes") or []:
        if not isinstance(change, dict):
            continue
        if change.get("version_id") in versions:
            change["path"] = change["previous_path"] = None
            if regex is None:
                change["reasoning"] = mark
        put(change, "path", path)
        put(change, "previous_path", path)
        put(change, "reasoning", text)
    for refused in data.get("refused") or []:
        if isinstance(refused, dict):
            put(refused, "path", path)
            put(refused, "message", text)
            put(refused, "reasoning", text)
    put(data, "instructions", text)
    if isinstance(data.get("error"), dict):
        put(data["error"], "message", text)
    return repr(data) != before
