"""``gitmem store ...``: create, list, show, update, archive, delete."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from gitmem import config
from gitmem import store as store_mod
from gitmem.cli import common
from gitmem.config import Limits, Retention, StoreSettings
from gitmem.errors import ConfigError, InvalidInputError

store_app = typer.Typer(help="Create, list, show, update, archive and delete stores.", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="Store id, a name only one store carries, or a path.")]
MetaOpt = Annotated[
    list[str] | None,
    typer.Option("--metadata", "-m", help="KEY=VALUE pair (repeatable); not shown to agents."),
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Confirm: this cannot be undone.")]
IntOpt = Annotated[int | None, typer.Option(min=1)]


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")


def parse_metadata(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; a pair without ``=`` is an InvalidInputError."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"metadata {pair!r} is not KEY=VALUE")
        out[key] = value
    return out


def _actor(value: str | None) -> str | None:
    from gitmem.model.versions import validate_actor

    chosen = common.actor(value)
    return validate_actor(chosen) if chosen is not None else None


def _acl(
    base: dict[str, Any],
    acl_json: str | None,
    write: list[str] | None,
    trust_trailers: list[str] | None,
    require_identity: bool | None,
    trust_push_actor: bool | None,
) -> dict[str, Any]:
    """The acl after the update options: ``--acl`` (JSON) replaces it, the others patch it."""
    import json as json_mod

    acl: dict[str, Any] = dict(base)
    if acl_json is not None:
        try:
            acl = json_mod.loads(acl_json)
        except ValueError as exc:
            raise InvalidInputError(f"--acl is not valid JSON: {exc}") from None
        if not isinstance(acl, dict):
            raise InvalidInputError('--acl must be a JSON object, e.g. \'{"write": {"team": ["user:*"]}}\'')
    for rule in write or []:
        scope_glob, sep, actors = rule.partition("=")
        if not sep or not scope_glob:
            raise InvalidInputError(f"--acl-write {rule!r} is not SCOPE=ACTOR[,ACTOR...] (empty: closed)")
        rules = dict(acl.get("write") or {})
        rules[scope_glob] = [a for a in actors.split(",") if a]
        acl["write"] = rules
    if trust_trailers is not None:
        acl["trust_trailers"] = [t for t in trust_trailers if t]
        if not acl["trust_trailers"]:
            del acl["trust_trailers"]
    if require_identity is not None:
        acl["require_identity"] = require_identity
    if trust_push_actor is not None:
        acl["trust_push_actor"] = trust_push_actor
    try:
        return config.validate_acl("--acl", acl)
    except ConfigError as exc:
        raise InvalidInputError(exc.message) from None


def _limits(base: Limits, **values: int | None) -> Limits:
    return dataclasses.replace(base, **{k: v for k, v in values.items() if v is not None})


def _render_settings(s: StoreSettings) -> None:
    typer.echo(f"{s.name}\t{s.id}\t{s.description}")


def _show_value(value: Any) -> str:
    """One setting as text: ``-`` for unset, ``k=v, ...`` for tables, JSON for nested values."""
    import json as json_mod

    if value is None or value == "" or value == {} or value == []:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ", ".join(
            f"{k}={_show_value(v) if not isinstance(v, (dict, list)) else json_mod.dumps(v)}"
            for k, v in value.items()
        )
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _render_show(info: dict[str, Any]) -> None:
    """Every setting of the store, one per line; nothing is ever printed as None."""
    order = ["name", "id", "path", "description", "created_at", "updated_at", "archived_at", "scopes"]
    keys = order + [k for k in info if k not in order]
    width = max(len(k) for k in keys) + 2
    lines = [f"{(k + ':'):{width}}{_show_value(info.get(k))}" for k in keys if k in info]
    typer.echo("\n".join(lines))


@store_app.command("create")
def create(
    name: Annotated[
        str,
        typer.Argument(help="Store name: free text, 1-255 characters (the store's id names its directory)."),
    ],
    description: Annotated[str, typer.Option("--description", "-d", help="Shown to agents.")] = "",
    metadata: MetaOpt = None,
    max_memory_bytes: Annotated[int | None, typer.Option(min=1, help="Largest memory, in bytes.")] = None,
    max_memories: Annotated[int | None, typer.Option(min=1, help="Most memories per scope.")] = None,
    max_store_bytes: Annotated[
        int | None, typer.Option(min=1, help="Sum of current sizes, all scopes.")
    ] = None,
    max_path_bytes: Annotated[int | None, typer.Option(min=1, help="Longest memory path, in bytes.")] = None,
    retention_min_days: Annotated[
        int | None, typer.Option(min=0, help="Keep versions at least this long.")
    ] = None,
    retention_max_days: Annotated[
        int | None, typer.Option(min=1, help="Compact versions older than this.")
    ] = None,
    keep_recent: Annotated[int | None, typer.Option(min=0, help="Versions per memory always kept.")] = None,
    from_bundle: Annotated[
        Path | None,
        typer.Option(
            help="Restore from this `gitmem export --format bundle` file (scopes, versions, ledger)."
        ),
    ] = None,
    backup: Annotated[
        Path | None,
        typer.Option(
            help="--from-bundle: directory with the backup's gitmem.yaml, secret, denylist, ledger_head."
        ),
    ] = None,
    allow_unverified: Annotated[
        bool, typer.Option(help="--from-bundle: keep the store even when gitmem verify fails (exit 7).")
    ] = False,
    keep_id: Annotated[
        bool,
        typer.Option(help="--from-bundle: keep the original's store id (refused while that store exists)."),
    ] = False,
    actor: common.ActorOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Create a store (a bare git repository with its settings and hooks), or restore one from a bundle."""
    if from_bundle is not None:
        given = [metadata, max_memory_bytes, max_memories, max_store_bytes, max_path_bytes]
        given += [retention_min_days, retention_max_days, keep_recent]
        if any(v is not None for v in given):
            _refuse(
                "--from-bundle takes the settings from --backup's gitmem.yaml (or defaults): "
                "change them afterwards with gitmem store update",
                json,
            )
        _restore(name, from_bundle, backup, description, allow_unverified, actor, home, json, keep_id)
        return
    if backup is not None or allow_unverified or keep_id:
        _refuse("--backup, --allow-unverified and --keep-id go with --from-bundle", json)

    def call() -> StoreSettings:
        limits = _limits(
            Limits(),
            max_memory_bytes=max_memory_bytes,
            max_memories=max_memories,
            max_store_bytes=max_store_bytes,
            max_path_bytes=max_path_bytes,
        )
        retention = dataclasses.replace(
            Retention(),
            **{
                k: v
                for k, v in (
                    ("min_days", retention_min_days),
                    ("max_days", retention_max_days),
                    ("keep_recent", keep_recent),
                )
                if v is not None
            },
        )
        with store_mod.create_store(
            name,
            description=description,
            metadata=parse_metadata(metadata),
            limits=limits,
            retention=retention,
            home=common.home(home),
            actor=_actor(actor),
        ) as s:
            return s.settings

    common.run(json, call, _render_settings)


def _refuse(message: str, as_json: bool) -> None:
    def call() -> None:
        raise InvalidInputError(message)

    common.run(as_json, call)


def _restore(
    name: str,
    bundle: Path,
    backup: Path | None,
    description: str,
    allow_unverified: bool,
    actor: str | None,
    home: Path | None,
    json: bool,
    keep_id: bool = False,
) -> None:
    from gitmem.store import Restored

    def call() -> Restored:
        return store_mod.restore_store(
            name,
            bundle,
            backup=backup,
            description=description or None,
            home=common.home(home),
            actor=_actor(actor),
            allow_unverified=allow_unverified,
            keep_id=keep_id,
        )

    def render(r: Restored) -> None:
        _render_settings(r.settings)
        files = ", ".join(r.private_files) or "none (see docs/operations.md#backup)"
        typer.echo(
            f"restored scopes {', '.join(r.scopes)} and {r.ledger_entries} ledger entries from {bundle}"
        )
        typer.echo(f"backup files restored: {files}")
        for c in r.verify.checks:
            ok, failed = common.green("ok"), common.red("FAILED")
            typer.echo(f"{ok}\t{c.name}" if c.ok else f"{failed}\t{c.name}: {c.detail}")

    restored = common.run(json, call, render)
    if not restored.verify.ok:
        raise typer.Exit(7)


@store_app.command("list")
def list_(home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """List the stores of the workspace: name, id, description (and archived ones)."""

    def render(stores: list[StoreSettings]) -> None:
        common.print_table(
            ["NAME", "ID", "ARCHIVED", "DESCRIPTION"],
            [[s.name, s.id, "archived" if s.archived_at else "-", s.description] for s in stores],
        )

    common.run(json, lambda: store_mod.list_stores(common.home(home)), render)


def _info(s: store_mod.Store) -> dict[str, Any]:
    return {**s.settings.to_dict(), "path": str(s.path), "scopes": s.scopes()}


@store_app.command("show")
def show(name: NameArg, home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """Show a store's settings, limits and scopes."""
    common.run(json, common.with_store(name, home, _info), _render_show)


@store_app.command("update")
def update(
    name: NameArg,
    new_name: Annotated[
        str | None, typer.Option("--name", help="Rename the store (free text; its id and URLs stay).")
    ] = None,
    description: Annotated[str | None, typer.Option("--description", "-d", help="New description.")] = None,
    metadata: MetaOpt = None,
    remove_metadata: Annotated[
        list[str] | None, typer.Option("--remove-metadata", help="Metadata key to remove (repeatable).")
    ] = None,
    max_memory_bytes: IntOpt = None,
    max_memories: IntOpt = None,
    max_store_bytes: IntOpt = None,
    max_path_bytes: IntOpt = None,
    retention_min_days: Annotated[int | None, typer.Option(min=0, help="Keep versions this long.")] = None,
    retention_max_days: Annotated[
        int | None, typer.Option(min=1, help="Compact versions older than this.")
    ] = None,
    no_retention_max_days: Annotated[
        bool, typer.Option("--no-retention-max-days", help="Never compact by age.")
    ] = False,
    keep_recent: Annotated[int | None, typer.Option(min=0, help="Versions per memory always kept.")] = None,
    acl_json: Annotated[
        str | None, typer.Option("--acl", help="The whole acl as JSON (replaces it; '{}' clears it).")
    ] = None,
    acl_write: Annotated[
        list[str] | None,
        typer.Option("--acl-write", help="SCOPE_GLOB=ACTOR_GLOB[,...]: who may write (repeatable)."),
    ] = None,
    trust_trailers: Annotated[
        list[str] | None,
        typer.Option(
            "--trust-trailers", help="Pusher glob whose trailers are believed (repeatable; '' clears)."
        ),
    ] = None,
    require_identity: Annotated[
        bool | None,
        typer.Option("--require-identity/--no-require-identity", help="Refuse unauthenticated pushes."),
    ] = None,
    trust_push_actor: Annotated[
        bool | None,
        typer.Option("--trust-push-actor/--no-trust-push-actor", help="Believe a '-o actor=' push option."),
    ] = None,
    require_trailers: Annotated[
        bool | None,
        typer.Option(
            "--require-trailers/--no-require-trailers", help="Refuse pushed commits without trailers."
        ),
    ] = None,
    guard_secrets: Annotated[
        str | None,
        typer.Option("--guard-secrets", help="What a secret in a write does: reject, flag or off."),
    ] = None,
    guard_pii: Annotated[
        str | None, typer.Option("--guard-pii", help="What personal data in a write does: flag or off.")
    ] = None,
    actor: common.ActorOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Change any setting: name, description, metadata (a patch), limits, retention, acl, trust and the write-time guard.

    Every change is recorded in the audit ledger with its actor and a diff."""

    def fn(s: store_mod.Store) -> StoreSettings:
        changes: dict[str, Any] = {}
        if new_name is not None and new_name != s.settings.name:
            changes["name"] = new_name
        if description is not None:
            changes["description"] = config.validate_description(description)
        if metadata or remove_metadata:
            meta = {**s.settings.metadata, **parse_metadata(metadata)}
            for key in remove_metadata or []:
                meta.pop(key, None)
            changes["metadata"] = config.validate_metadata(meta)
        limits = _limits(
            s.settings.limits,
            max_memory_bytes=max_memory_bytes,
            max_memories=max_memories,
            max_store_bytes=max_store_bytes,
            max_path_bytes=max_path_bytes,
        )
        if limits != s.settings.limits:
            changes["limits"] = limits
        retention = dataclasses.replace(
            s.settings.retention,
            **{
                k: v
                for k, v in (
                    ("min_days", retention_min_days),
                    ("max_days", retention_max_days),
                    ("keep_recent", keep_recent),
                )
                if v is not None
            },
        )
        if no_retention_max_days:
            retention = dataclasses.replace(retention, max_days=None)
        if retention != s.settings.retention:
            changes["retention"] = retention
        acl = _acl(s.settings.acl, acl_json, acl_write, trust_trailers, require_identity, trust_push_actor)
        if acl != s.settings.acl:
            changes["acl"] = acl
        if require_trailers is not None and require_trailers != s.settings.require_trailers:
            changes["require_trailers"] = require_trailers
        if guard_secrets is not None or guard_pii is not None:
            guard = dict(s.settings.guard)
            guard.update({k: v for k, v in (("secrets", guard_secrets), ("pii", guard_pii)) if v is not None})
            if guard != s.settings.guard:
                changes["guard"] = guard
        if not changes:
            raise InvalidInputError("nothing to update: every given setting already has that value")
        return s.update_settings(actor=_actor(actor), **changes)

    common.run(json, common.with_store(name, home, fn), _render_settings)


def _need_yes(yes: bool, what: str, as_json: bool) -> None:
    if not yes:
        raise common.fail(InvalidInputError(f"{what}; pass --yes to confirm"), common.want_json(as_json))


@store_app.command("archive")
def archive(
    name: NameArg,
    yes: YesOpt = False,
    actor: common.ActorOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Archive a store: it stays readable but refuses every write, for good (needs --yes)."""
    _need_yes(yes, f"archiving store {name!r} makes it read-only for good", json)

    def fn(s: store_mod.Store) -> StoreSettings:
        return s.update_settings(archived_at=config.now_rfc3339(), actor=_actor(actor))

    common.run(
        json, common.with_store(name, home, fn), lambda s: typer.echo(f"archived {s.name} at {s.archived_at}")
    )


@store_app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="Store id, or a name only one store carries.")],
    yes: YesOpt = False,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Delete a store with all its memories and history, permanently (needs --yes)."""
    _need_yes(yes, f"deleting store {name!r} destroys all its memories and history", json)

    def call() -> dict[str, str]:
        ref = store_mod.resolve_store(name, common.home(home))
        path: Path = store_mod.delete_store(ref.id, common.home(home))
        return {"deleted": name, "id": ref.id, "path": str(path)}

    common.run(json, call, lambda d: typer.echo(f"deleted {d['deleted']} ({d['path']})"))
