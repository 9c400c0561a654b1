"""``gitmem dream run|schedule|list|show|cancel``: consolidation of a store by a model, and its
memory pipeline (docs/dreams.md).

``run`` works in this process, in the foreground, with the dreamer's settings from the environment
(``GITMEM_DREAM_BASE_URL``, ``GITMEM_DREAM_API_KEY`` or ``ANTHROPIC_API_KEY``); the dream is
recorded in the workspace like one asked for through ``gitmem serve``, so ``list``, ``show`` and
``cancel`` (from another shell) see it either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gitmem import config
from gitmem.cli import common
from gitmem.cli.memories import StoreArg
from gitmem.errors import InvalidInputError

dream_app = typer.Typer(
    help="Dreams: a model consolidates a store (duplicates merged, stale facts replaced); its changes land as a proposal.",
    no_args_is_help=True,
)
IdArg = Annotated[str, typer.Argument(help="Dream id (drm_...).")]
ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="The model that runs the dream.")]
InstructionsOpt = Annotated[
    str | None, typer.Option("--instructions", "-i", help="Guidance for the dream (1-4,096 characters).")
]
NewOpt = Annotated[
    bool,
    typer.Option("--create-new", help="Write a new store copied from this one (the input is not changed)."),
]
NoReviewOpt = Annotated[
    bool, typer.Option("--no-review", help="update_existing: publish each change instead of a proposal.")
]


def register(app: typer.Typer) -> None:
    app.add_typer(dream_app, name="dream")


def _home(value: Path | None) -> Path:
    return config.workspace_home(common.home(value))


def _jobs(home: Path) -> Any:
    from gitmem.server.dream_jobs import DreamJobs

    return DreamJobs(home)


def _json(d: Any) -> Any:
    """The record on the wire, as the local full-trust caller sees it (the library's rule, with no
    caller: everything; docs/dreams.md, "Who sees a dream's changes")."""
    from gitmem.server import dream_runs
    from gitmem.server.dreams_api import dream_json

    return dream_json(dream_runs.seen(d, None))


def _show(d: Any) -> None:
    out = _json(d)
    ext = out["gitmem"]
    typer.echo(f"{d.id}: {d.status} ({d.behavior}, store {d.store}, scope {d.scope}, model {d.model})")
    if d.error:
        typer.echo(f"  error: {d.error['type']}: {d.error['message']}")
    if d.output and d.behavior == "create_new":
        typer.echo(f"  output store: {d.output}")
    if ext["proposal_id"]:
        typer.echo(f"  proposal: {ext['proposal_id']} (gitmem review show {d.store} {ext['proposal_id']})")
    u = d.usage
    typer.echo(f"  usage: {u['input_tokens']} input, {u['output_tokens']} output tokens, {d.turns} turns")
    for c in ext["changes"]:
        where = "landed" if c["landed"] else "proposed"
        typer.echo(f"  {where} {c['operation']} {c['path']}: {c['reasoning']}")
    for r in ext["refused"]:
        typer.echo(f"  refused {r['command']} {r['path']}: {r['message']}")


@dream_app.command("run")
def run(
    store: StoreArg,
    session: Annotated[
        list[str] | None,
        typer.Option(
            "--session",
            help="A session to dream over (repeatable); default: the sessions since the last run.",
        ),
    ] = None,
    model: ModelOpt = None,
    instructions: InstructionsOpt = None,
    create_new: NewOpt = False,
    no_review: NoReviewOpt = False,
    scope: common.ScopeOpt = "main",
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Dream now, in the foreground: over the given sessions, else over the sessions since the
    store's last run (its pipeline; one is made with --model when there is none)."""

    def call() -> Any:
        from gitmem.server import dream_runs
        from gitmem.server.dream_jobs import Pipeline
        from gitmem.server.dreamer import DreamRunner

        h = _home(home)
        jobs = _jobs(h)
        behavior = "create_new" if create_new else "update_existing"
        who = common.actor(None) or "user:local"
        if session:
            if model is None:
                raise InvalidInputError("--model: which model runs the dream")
            d = dream_runs.new_dream(
                jobs,
                h,
                store,
                sessions=list(session),
                model=model,
                instructions=instructions,
                behavior=behavior,
                review=not no_review,
                scope=scope,
                requested_by=who,
                trigger="cli",
            )
        else:
            if jobs.pipeline(dream_runs.handle_of(store, h)) is None:  # keyed by the store's handle
                if model is None:
                    raise InvalidInputError(
                        f"store {store!r} has no memory pipeline: give --model (or --session)"
                    )
                p = Pipeline(store, model, instructions, behavior, not no_review, scope)
                dream_runs.set_pipeline(jobs, h, p, requested_by=who)
            found = dream_runs.trigger(jobs, h, store, trigger="cli", requested_by=who)
            if found is None:
                return None
            d = found
        DreamRunner(h).run(d.id)
        return jobs.get(d.id)

    def render(d: Any) -> None:
        if d is None:
            typer.echo("no session wrote anything since the last run: nothing to dream over")
        else:
            _show(d)

    if common.want_json(json):
        out = common.run(True, lambda: (lambda d: _json(d) if d is not None else None)(call()))
        failed = out is not None and out["status"] == "failed"
    else:
        d = common.run(False, call, render)
        failed = d is not None and d.status == "failed"
    if failed:
        raise typer.Exit(1)


@dream_app.command("schedule")
def schedule(
    store: StoreArg,
    model: Annotated[str, typer.Option("--model", "-m", help="The model that runs the dreams.")],
    every: Annotated[
        int, typer.Option("--every", min=0, help="Seconds between runs by gitmem serve; 0: manual only.")
    ] = 0,
    instructions: InstructionsOpt = None,
    create_new: NewOpt = False,
    no_review: NoReviewOpt = False,
    scope: common.ScopeOpt = "main",
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Set the store's memory pipeline: what a run asks for and how often gitmem serve starts one."""

    def call() -> Any:
        from gitmem.server import dream_runs
        from gitmem.server.dream_jobs import Pipeline

        h = _home(home)
        p = Pipeline(
            store,
            model,
            instructions,
            "create_new" if create_new else "update_existing",
            not no_review,
            scope,
            every,
        )
        who = common.actor(None) or "user:local"
        return dream_runs.set_pipeline(_jobs(h), h, p, requested_by=who).to_dict()

    def render(p: Any) -> None:
        when = f"every {p['every_seconds']} s" if p["every_seconds"] else "manual runs only"
        typer.echo(f"pipeline of {p['store']}: {p['behavior']}, model {p['model']}, {when}")

    common.run(json, call, render)


@dream_app.command("list")
def list_(
    store: Annotated[str | None, typer.Option("--store", help="Only the dreams of this store.")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="pending, running, completed, failed or canceled.")
    ] = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Dreams, newest first."""

    def call() -> Any:
        from gitmem.server import dream_runs

        h = _home(home)
        handle = dream_runs.handle_of(store, h) if store is not None else None
        return [
            _json(d)
            for d in _jobs(h).all()
            if (handle is None or d.store == handle) and (status is None or d.status == status)
        ]

    def render(rows: Any) -> None:
        common.print_table(
            ["ID", "STATUS", "STORE", "BEHAVIOR", "CHANGES", "PROPOSAL", "CREATED"],
            [
                [
                    r["id"],
                    r["status"],
                    r["gitmem"]["store"],
                    r["output_behavior"]["type"],
                    str(len(r["gitmem"]["changes"])),
                    r["gitmem"]["proposal_id"] or "",
                    r["created_at"],
                ]
                for r in rows
            ],
        )

    common.run(json, call, render)


@dream_app.command("show")
def show(dream: IdArg, home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """A dream: status, usage, and each change with the model's reasoning."""

    def call() -> Any:
        return _jobs(_home(home)).get(dream)

    if common.want_json(json):
        common.run(True, lambda: _json(call()))
    else:
        common.run(False, call, _show)


@dream_app.command("cancel")
def cancel(dream: IdArg, home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """Cancel a pending or running dream; what it wrote so far is kept (in its proposal)."""

    def call() -> Any:
        return _jobs(_home(home)).cancel(dream)

    if common.want_json(json):
        common.run(True, lambda: _json(call()))
    else:
        common.run(False, call, _show)
