"""Workspace location, environment variables and store settings (``<store>.git/gitmem.yaml``).

This is the only module that reads ``os.environ``. Settings load into frozen dataclasses and are
validated on load; a bad file raises ConfigError naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmem.errors import ConfigError, InvalidInputError

SETTINGS_FILE = "gitmem.yaml"
# $GIT_DIR/gitmem/settings.json: the settings as JSON, for readers that skip yaml (load_settings_cached)
SETTINGS_CACHE = "settings.json"
MAX_DESCRIPTION = 1024
MAX_METADATA_PAIRS = 16


def workspace_home(home: str | os.PathLike[str] | None = None) -> Path:
    """``--home``, else ``$GITMEM_HOME``, else ``$XDG_DATA_HOME/gitmem``, else ``~/.local/share/gitmem``."""
    if home:
        return Path(home).expanduser()
    env = os.environ.get("GITMEM_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "gitmem"
    return Path.home() / ".local" / "share" / "gitmem"


def env(name: str) -> str | None:
    """One environment variable (the CLI reads ``GITMEM_ACTOR``/``GITMEM_SESSION`` through this)."""
    value = os.environ.get(name)
    return value or None


def export_home(home: Path) -> None:
    """Set ``$GITMEM_HOME`` for child processes (``gitmem serve --workers N`` spawns its workers)."""
    os.environ["GITMEM_HOME"] = str(home)


def env_snapshot() -> dict[str, str]:
    """A copy of the environment, for code (the hook) that must look at several variables."""
    return dict(os.environ)


# Inside a git hook these point git at the pushing repository or its quarantine: never for a git
# that gitmem runs on a store of its own choosing.
REPO_ENV = (
    "GIT_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_QUARANTINE_PATH",
    "GIT_INDEX_FILE",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)


def plain_git_env() -> dict[str, str]:
    """The environment for a ``git --git-dir=...`` run by gitmem: no repository variables inherited."""
    return {k: v for k, v in os.environ.items() if k not in REPO_ENV}


def fault(point: str) -> None:
    """Crash-safety tests: die at once (SIGKILL) at ``point`` when ``$GITMEM_FAULT`` names it."""
    if os.environ.get("GITMEM_FAULT") == point:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Limits:
    max_memory_bytes: int = 102400
    max_memories: int = 10000
    max_store_bytes: int = 104857600
    max_path_bytes: int = 1024


@dataclass(frozen=True)
class Retention:
    min_days: int = 30
    max_days: int | None = None
    keep_recent: int = 10


@dataclass(frozen=True)
class StoreSettings:
    id: str
    name: str
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    archived_at: str | None = None
    limits: Limits = field(default_factory=Limits)
    retention: Retention = field(default_factory=Retention)
    acl: dict[str, Any] = field(default_factory=dict)
    require_trailers: bool = False
    #: The write-time guard's mapping (docs/guard.md). It is checked by
    #: ``gitmem.model.guard.GuardPolicy.from_dict`` wherever a store's settings are loaded (the
    #: model layer sits above this one). A file without the key gets the defaults of new stores.
    guard: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_GUARD))
    #: The Databricks face's ``catalog.schema.name`` of the store, unique in the workspace and
    #: separate from the free-text ``name`` (docs/stores.md); None for a store made elsewhere.
    full_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _utf8(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} is not valid UTF-8 text (a lone surrogate)") from None


def validate_description(description: str) -> str:
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise InvalidInputError(f"description is over {MAX_DESCRIPTION} characters")
    _utf8(description, "description")
    return description


def validate_metadata(metadata: dict[str, str]) -> dict[str, str]:
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidInputError(f"metadata has {len(metadata)} pairs; at most {MAX_METADATA_PAIRS}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 64:
            raise InvalidInputError(f"metadata key {key!r} must be 1-64 characters")
        if not isinstance(value, str) or len(value) > 512:
            raise InvalidInputError(f"metadata value for {key!r} must be a string of at most 512 characters")
        _utf8(key, "a metadata key")
        _utf8(value, f"metadata value for {key!r}")
    return dict(metadata)


def _int(src: str, key: str, value: Any, *, minimum: int = 0, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if value is None:
        raise ConfigError(f"{src}: key '{key}' must be an integer >= {minimum}, got null")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{src}: key '{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def _section(src: str, key: str, value: Any, cls: type[Any], nullable: tuple[str, ...] = ()) -> Any:
    if value is None:
        return cls()
    if not isinstance(value, dict):
        raise ConfigError(f"{src}: key '{key}' must be a mapping")
    names = {f.name for f in dataclasses.fields(cls)}
    for k in value:
        if k not in names:
            raise ConfigError(f"{src}: unknown key '{key}.{k}'")
    kwargs = {
        k: _int(src, f"{key}.{k}", v, minimum=1 if k.startswith("max_") else 0, nullable=k in nullable)
        for k, v in value.items()
    }
    return cls(**kwargs)


def _limits(src: str, value: Any) -> Limits:
    limits: Limits = _section(src, "limits", value, Limits)
    if limits.max_path_bytes > Limits.max_path_bytes:
        # Memory paths are at most 1,024 bytes (docs/architecture.md#memories-and-paths); a store may only lower that.
        raise ConfigError(f"{src}: key 'limits.max_path_bytes' must be at most {Limits.max_path_bytes}")
    return limits


#: The keys of ``acl`` (docs/identity.md): who may write which scope, and whom the store believes.
ACL_KEYS = ("write", "review", "require_identity", "trust_push_actor", "trust_trailers")


def _globs(src: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{src}: key '{key}' must be a list of actor patterns (strings)")
    return list(value)


def validate_acl(src: str, acl: Any) -> dict[str, Any]:
    """Check ``acl`` by type and value; errors name ``src`` and the key."""
    if acl is None:
        return {}
    if not isinstance(acl, dict):
        raise ConfigError(f"{src}: key 'acl' must be a mapping")
    out: dict[str, Any] = {}
    for key, value in acl.items():
        if key not in ACL_KEYS:
            raise ConfigError(f"{src}: unknown key 'acl.{key}' (known: {', '.join(ACL_KEYS)})")
        if key in ("write", "review"):  # review: who writes as a proposal (docs/review.md)
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{src}: key 'acl.{key}' must be a mapping of scope patterns to lists of actor "
                    f"patterns, got {type(value).__name__}"
                )
            rules: dict[str, list[str]] = {}
            for scope_glob, actors in value.items():
                if not isinstance(scope_glob, str) or not scope_glob:
                    raise ConfigError(f"{src}: key 'acl.{key}' has a scope pattern that is not a string")
                rules[scope_glob] = _globs(src, f"acl.{key}.{scope_glob}", [] if actors is None else actors)
            out[key] = rules
        elif key in ("require_identity", "trust_push_actor"):
            if not isinstance(value, bool):
                raise ConfigError(f"{src}: key 'acl.{key}' must be true or false, got {value!r}")
            out[key] = value
        else:
            out[key] = _globs(src, f"acl.{key}", value)
    return out


DEFAULT_GUARD: dict[str, Any] = {
    "secrets": "reject",
    "pii": "off",
    "patterns": [],
    "allow": [],
    "deny_patterns": [],
}


def _guard(src: str, value: Any) -> dict[str, Any]:
    if value is None:
        return dict(DEFAULT_GUARD)
    if not isinstance(value, dict):
        raise ConfigError(f"{src}: key 'guard' must be a mapping")
    return {**DEFAULT_GUARD, **value}


def _is_timestamp(value: Any) -> bool:
    if not isinstance(value, str) or not value or len(value) > 40:
        return False
    try:
        dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def settings_from_dict(data: Any, src: str) -> StoreSettings:
    """Validate a parsed settings mapping; errors name ``src`` and the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{src}: the settings must be a mapping")
    known = {f.name for f in dataclasses.fields(StoreSettings)}
    for key in data:
        if key not in known:
            raise ConfigError(f"{src}: unknown key '{key}'")
    for key in ("id", "name"):
        if not isinstance(data.get(key), str) or not data.get(key):
            raise ConfigError(f"{src}: key '{key}' is missing or not a string")
    for key in ("description", "created_at", "updated_at"):
        if not isinstance(data.get(key, ""), str):
            raise ConfigError(f"{src}: key '{key}' must be a string")
    if len(data.get("description", "")) > MAX_DESCRIPTION:
        raise ConfigError(f"{src}: key 'description' is over {MAX_DESCRIPTION} characters")
    archived = data.get("archived_at")
    if archived is not None and not _is_timestamp(archived):
        raise ConfigError(f"{src}: key 'archived_at' must be an RFC 3339 timestamp string or null")
    metadata = {} if data.get("metadata") is None else data["metadata"]  # [] or "" are errors, not {}
    if not isinstance(metadata, dict):
        raise ConfigError(f"{src}: key 'metadata' must be a mapping")
    try:
        metadata = validate_metadata({str(k): v for k, v in metadata.items()})
    except InvalidInputError as exc:
        raise ConfigError(f"{src}: key 'metadata': {exc.message}") from None
    acl = validate_acl(src, data.get("acl"))
    full_name = data.get("full_name")
    if full_name is not None and (not isinstance(full_name, str) or not full_name):
        raise ConfigError(f"{src}: key 'full_name' must be a non-empty string or null")
    require = data.get("require_trailers", False)
    if not isinstance(require, bool):
        raise ConfigError(f"{src}: key 'require_trailers' must be true or false")
    return StoreSettings(
        id=data["id"],
        name=data["name"],
        description=data.get("description", ""),
        metadata=metadata,
        created_at=data.get("created_at", ""),
        updated_at=data.get("updated_at", ""),
        archived_at=archived,
        limits=_limits(src, data.get("limits")),
        retention=_section(src, "retention", data.get("retention"), Retention, ("max_days",)),
        acl=acl,
        require_trailers=require,
        guard=_guard(src, data.get("guard")),
        full_name=full_name,
    )


def load_settings(path: Path) -> StoreSettings:
    """Read and validate a settings file."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: settings file is missing") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: settings file is not UTF-8") from None
    try:
        data = yaml.load(text, Loader=_unique_keys_loader())  # noqa: S506 (a SafeLoader subclass)
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}: key '{exc.key}' is given twice (line {exc.line})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    except (ValueError, RecursionError) as exc:  # e.g. "archived_at: 2026-02-30"
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    return settings_from_dict(data, str(path))


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(key)
        self.key, self.line = key, line


def _unique_keys_loader() -> Any:
    """yaml's SafeLoader refusing a key given twice in one mapping: PyYAML keeps the last one
    silently, so ``trust_push_actor: false`` read first and ``true`` further down would be true."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _value in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # "<<: *anchor": explicit keys may override merged ones
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                        seen.add(key)
                    except TypeError:  # an unhashable key: SafeLoader refuses it itself
                        continue
                    if duplicate:
                        raise _DuplicateKey(str(key), key_node.start_mark.line + 1)
            return super().construct_mapping(node, deep=deep)

    return Loader


# A settings file changed less than this before it is read is not cached: an edit in place of the
# same size within its time stamp's tick would otherwise keep the key of the copy (git's "racy" files).
CACHE_RACY_NS = 2_000_000_000


def load_settings_cached(path: Path, cache: Path) -> StoreSettings:
    """:func:`load_settings` through a JSON copy at ``cache``, keyed by the file's inode, size and
    mtime: the pre-receive hook starts, and the resolver finds a store by name, without importing
    yaml. Validated on every load all the same. A file younger than :data:`CACHE_RACY_NS` is read
    but not cached."""
    import json
    import time

    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{path}: settings file is missing") from None
    key = [st.st_ino, st.st_size, st.st_mtime_ns]
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached.get("key") == key:
            return settings_from_dict(cached["settings"], str(path))
    except (OSError, ValueError, KeyError, AttributeError, ConfigError):
        pass
    settings = load_settings(path)
    if st.st_mtime_ns + CACHE_RACY_NS > time.time_ns():
        return settings
    try:
        tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "settings": settings.to_dict()}), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass  # only a cache
    return settings


def save_settings(path: Path, settings: StoreSettings) -> None:
    """Write settings atomically (temp file, fsync, rename)."""
    import yaml

    data = settings.to_dict()
    if data.get("full_name") is None:
        data.pop("full_name", None)  # the file of a store without one reads as before
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
