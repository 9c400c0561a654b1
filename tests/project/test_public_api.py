"""The public API of ``gitmem/__init__.py`` keeps working, and ``Store``'s methods spell their parameters out.

docs/architecture.md#python-api describes this surface; every exported name is imported and used
here, so a rename or a broken lazy import fails a test instead of a caller.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

import gitmem
import gitmem.store
from gitmem import errors

# Each error and the exit code docs/architecture.md#errors-and-exit-codes gives it.
ERRORS = {
    "GitmemError": 1,
    "InvalidInputError": 2,
    "ConfigError": 2,
    "NotFoundError": 3,
    "ConflictError": 4,
    "PathConflictError": 4,
    "PreconditionFailedError": 4,
    "LimitExceededError": 5,
    "ForbiddenError": 6,
    "IntegrityError": 7,
}
VALUE_TYPES = {
    "Memory",
    "Prefix",
    "Redaction",
    "RedactionInfo",
    "SearchHit",
    "SearchResults",
    "Version",
    # review (docs/review.md)
    "Accepted",
    "Decision",
    "Erased",
    "PathDiff",
    "Proposal",
    "ProposalSummary",
}
CONSTANTS = {"PROPOSAL_STATUSES"}
FUNCTIONS = {"create_store", "delete_store", "list_stores", "open_store"}

# What a user may call on a Store. Adding to the facade is a decision: update this list and the
# Python API section of docs/architecture.md together.
STORE_SURFACE = {
    "accept",
    "add_conversation_items",
    "add_replica",
    "audit",
    "batch",
    "blob",
    "changed_files",
    "check_writable",
    "conversation",
    "conversation_item",
    "conversation_items",
    "close",
    "core",
    "cosign",
    "create",
    "create_conversation",
    "delete",
    "delete_conversation",
    "delete_conversation_item",
    "delete_by_id",
    "diff",
    "diff_at",
    "erase_proposal",
    "export_bundle",
    "export_jsonl",
    "file_at",
    "files",
    "has_object",
    "hand_over",
    "head_bytes",
    "id",
    "import_jsonl",
    "import_tree",
    "insert",
    "is_clone",
    "last_replica_pushes",
    "last_verify",
    "list",
    "memory_head",
    "list_page",
    "memory_by_id",
    "name",
    "open_proposal",
    "path",
    "proposal",
    "proposal_diff",
    "proposal_has_chain",
    "proposal_paths",
    "proposal_summary",
    "proposal_versions",
    "proposals",
    "prune",
    "push_replicas",
    "read",
    "receipt",
    "record",
    "record_paths",
    "records",
    "redact",
    "redact_pattern",
    "redacted_files",
    "redaction_preview",
    "redaction_preview_blobs",
    "redaction_receipt",
    "reindex",
    "reject",
    "rename",
    "repack",
    "replicas",
    "restore",
    "revert_session",
    "review_owner",
    "rotate_log_key",
    "scope_counts",
    "scopes",
    "search",
    "search_marked",
    "session_writes",
    "settings",
    "state_at",
    "str_replace",
    "tip",
    "tlog_newest",
    "tlog_policy",
    "tlog_vkey",
    "unredacted_blobs",
    "update_conversation",
    "update_by_id",
    "update_settings",
    "verify",
    "version",
    "version_scopes",
    "versions",
    "write",
}


def test_all_lists_exactly_the_names_tested_here() -> None:
    assert set(gitmem.__all__) == set(ERRORS) | VALUE_TYPES | CONSTANTS | FUNCTIONS | {"Store"}
    assert gitmem.__version__ == "0.1.0"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        gitmem.nope  # noqa: B018


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_each_error_is_raisable_with_an_exit_code(name: str) -> None:
    cls = getattr(gitmem, name)
    assert cls is getattr(errors, name)
    args = ("what went wrong", "/a.md") if name == "PathConflictError" else ("what went wrong",)
    with pytest.raises(gitmem.GitmemError) as info:
        raise cls(*args)
    assert str(info.value) == info.value.message == "what went wrong"
    assert info.value.exit_code == ERRORS[name]


def test_the_store_raises_the_exported_errors(store: gitmem.Store) -> None:
    store.write("/a.md", "x")
    with pytest.raises(gitmem.PathConflictError) as conflict:
        store.create("/a.md", "y")
    assert conflict.value.conflicting_path == "/a.md"
    with pytest.raises(gitmem.PreconditionFailedError):
        store.write("/a.md", "z", if_sha256="0" * 64)
    with pytest.raises(gitmem.NotFoundError):
        store.read("/missing.md")
    with pytest.raises(gitmem.InvalidInputError):
        store.write("no-slash.md", "x")


def test_the_functions_create_open_list_and_delete(workspace: Path) -> None:
    created = gitmem.create_store("api", description="API test", home=workspace)
    assert isinstance(created, gitmem.Store)
    sid = created.id
    created.close()
    assert [s.name for s in gitmem.list_stores(home=workspace)] == ["api"]
    with gitmem.open_store("api", home=workspace) as opened:
        assert opened.name == "api" and opened.settings.description == "API test"
    here = workspace / "stores" / f"{sid}.git"  # the directory follows the id
    with gitmem.open_store(here) as by_path:
        assert by_path.path == here
    gitmem.delete_store("api", home=workspace)
    assert gitmem.list_stores(home=workspace) == []
    with pytest.raises(gitmem.NotFoundError):
        gitmem.open_store("api", home=workspace)


def test_the_value_types_come_back_from_the_store(store: gitmem.Store) -> None:
    old = store.write("/keys/a.md", "token sk-123\n", description="a key", actor="user:alice")
    assert isinstance(old, gitmem.Version)
    store.write("/keys/a.md", "token gone\n", actor="user:alice")
    memory = store.read("/keys/a.md")
    assert isinstance(memory, gitmem.Memory) and memory.content == "token gone\n"
    (prefix,) = store.list("/", depth=1)
    assert isinstance(prefix, gitmem.Prefix) and (prefix.path, prefix.memories) == ("/keys/", 1)
    (hit,) = store.search("gone")
    assert isinstance(hit, gitmem.SearchHit) and hit.path == "/keys/a.md"
    found = store.search("alpha")
    assert isinstance(found, gitmem.SearchResults) and found.mode == "lexical"
    redaction = store.redact(old.id, reason="leaked key", actor="user:sec")
    assert isinstance(redaction, gitmem.Redaction) and redaction.versions == [old.id]
    info = store.version(old.id).redaction
    assert isinstance(info, gitmem.RedactionInfo) and info.reason == "leaked key"
    # Each is a frozen dataclass a caller can rebuild from its own fields.
    for value in (old, memory, prefix, hit, redaction, info):
        assert type(value)(**{f.name: getattr(value, f.name) for f in dataclasses.fields(value)}) == value
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.path = "/x"  # type: ignore[misc, union-attr]


def _public(cls: type) -> dict[str, object]:
    """The public attributes of ``cls`` and of the pieces it is assembled from (gitmem/facade/)."""
    out: dict[str, object] = {}
    for base in reversed(cls.__mro__[:-1]):  # object's own attributes are not the facade's
        out.update({name: value for name, value in vars(base).items() if not name.startswith("_")})
    return out


def _hints(fn: Callable[..., object]) -> dict[str, object]:
    # Resolve the string annotations (PEP 563) against the module defining ``fn`` (a piece of
    # gitmem/facade/) plus the exported types, which the facade imports only for type checking.
    names = {
        **vars(gitmem.store),
        **getattr(fn, "__globals__", {}),
        **{n: getattr(gitmem.store, n) for n in gitmem.store.VALUES},
    }
    return typing.get_type_hints(fn, globalns=names)


def test_store_has_exactly_the_public_surface() -> None:
    assert set(_public(gitmem.Store)) == STORE_SURFACE


@pytest.mark.parametrize(
    "fn",
    [
        *(v for v in _public(gitmem.Store).values() if callable(v)),
        gitmem.store.create_store,
        gitmem.store.open_store,
        gitmem.store.list_stores,
        gitmem.store.delete_store,
    ],
    ids=lambda fn: fn.__name__,
)
def test_signatures_are_spelled_out_and_typed(fn: Callable[..., object]) -> None:
    sig = inspect.signature(fn)
    variadic = [p.name for p in sig.parameters.values() if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    assert variadic == [], f"{fn.__name__} hides parameters behind {variadic}"
    hints = _hints(fn)
    untyped = [p for p in sig.parameters if p != "self" and p not in hints]
    assert untyped == [] and "return" in hints, f"{fn.__name__}: untyped {untyped or 'return'}"
    assert fn.__doc__ or fn.__name__ == "close", f"{fn.__name__} has no docstring"


@pytest.mark.parametrize(
    "name", sorted(n for n, v in _public(gitmem.Store).items() if isinstance(v, property))
)
def test_properties_are_typed(name: str) -> None:
    prop = _public(gitmem.Store)[name]
    assert isinstance(prop, property)
    assert "return" in _hints(prop.fget)
