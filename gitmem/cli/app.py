"""The ``gitmem`` typer application: global options, the command groups registered on it, and the
click command built from it (grouped help, readable metavars, usage errors as ``Error:`` or JSON).

A command's module is imported only when that command runs (or when a listing of every command is
asked for, as ``--help`` does): ``gitmem ls`` never loads the server, the sessions or the cluster.
"""

from __future__ import annotations

import importlib
import json as json_mod
import sys
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import typer
import typer.core
from typer import Abort
from typer.core import TyperGroup

try:  # recent typer vendors click as typer._click (its own classes); older ones use click itself
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import ClickException, UsageError  # type: ignore[assignment,no-redef,unused-ignore]

from gitmem.cli import common  # noqa: E402

Command = Any  # a click(-like) command: duck-typed, as typer's own classes differ between versions
Context = Any
HelpFormatter = Any

# The groups of ``gitmem --help``, in order; every top-level command belongs to exactly one.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Memories", ("write", "create", "read", "ls", "edit", "rm", "mv", "search")),
    ("History", ("log", "show", "diff", "restore")),
    ("Stores", ("store", "export", "import", "reindex", "maintain")),
    ("Sessions", ("session", "revert-session")),
    (
        "Audit and redaction",
        ("audit", "redact", "verify", "prune", "review", "receipt", "witness", "tlog", "dream"),
    ),
    ("Git", ("clone", "fetch", "hooks", "replica")),
    ("Server", ("serve", "token", "webhook", "mcp", "cluster")),
    ("Help", ("help", "completion")),
)


def _first_line(cmd: Command) -> str:
    text = (cmd.help or cmd.short_help or "").strip()
    return text.split("\n\n", 1)[0].replace("\n", " ").strip()


class GroupedGroup(TyperGroup):
    """``--help`` lists commands by group, each with its whole first paragraph (never cut off).

    The root's commands load lazily: ``get_command`` imports only the named command's module (see
    ``COMMANDS``); anything reading ``commands`` itself (help, the reference, completion) gets all.
    """

    @property  # type: ignore[override]
    def commands(self) -> dict[str, Command]:
        for module in COMMANDS:
            self._load(module)
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, Command]) -> None:
        self._commands = dict(value)
        self._loaded: set[str] = set()

    def _load(self, module: str) -> None:
        """Register ``gitmem.cli.MODULE``'s commands (once), tidied as the root's own are."""
        if module in self._loaded:
            return
        self._loaded.add(module)
        sub = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
        importlib.import_module(f"gitmem.cli.{module}").register(sub)
        made = typer.main.get_group(sub).commands
        if set(made) != set(COMMANDS[module]):  # the table below and the module's register() disagree
            raise RuntimeError(f"gitmem.cli.{module} registers {sorted(made)}, not {COMMANDS[module]}")
        for name, cmd in made.items():
            _tidy(cmd, CONTEXT)
            self._commands[name] = cmd

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        module = MODULE_OF.get(cmd_name)
        if module is not None:
            self._load(module)
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: Context) -> list[str]:
        names = [name for names in COMMANDS.values() for name in names]
        return names + [name for name in self._commands if name not in MODULE_OF]

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        if ctx.parent is not None:  # a sub-group (``gitmem store``): one plain list
            rows = [(n, _first_line(c)) for n, c in self.commands.items() if not c.hidden]
            if rows:
                with formatter.section("Commands"):
                    formatter.write_dl(rows)
            return
        placed: set[str] = set()
        for title, names in GROUPS:
            rows = [(n, _first_line(self.commands[n])) for n in names if n in self.commands]
            placed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [(n, _first_line(c)) for n, c in self.commands.items() if n not in placed and not c.hidden]
        if rest:
            with formatter.section("Other"):
                formatter.write_dl(rest)

    _tidied = False

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Usage errors as ``Error: ...`` with a hint (or ``{"error": ...}`` with --json), exit 2."""
        if not self._tidied:  # the root's own options; each command is tidied as it loads
            _tidy(self, CONTEXT)
            self._tidied = True
        argv = list(args) if args is not None else sys.argv[1:]
        code = _run(lambda: super(GroupedGroup, self).main(
            argv, prog_name or "gitmem", complete_var, standalone_mode=False, **extra
        ), argv)  # fmt: skip
        if standalone_mode:
            sys.exit(code)
        return code


def _run(call: Any, argv: list[str]) -> int:
    try:
        rv = call()
    except UsageError as exc:
        if "--json" in argv:
            payload = {"error": {"type": "usage", "message": exc.format_message()}}
            sys.stderr.write(json_mod.dumps(payload, ensure_ascii=False) + "\n")
        else:
            hint = ""
            if exc.ctx is not None:
                hint = f"{exc.ctx.get_usage()}\nTry '{exc.ctx.command_path} -h' for help.\n"
            sys.stderr.write(hint + common.red("Error:", err=True) + f" {exc.format_message()}\n")
        return 2
    except ClickException as exc:
        sys.stderr.write(common.red("Error:", err=True) + f" {exc.format_message()}\n")
        return exc.exit_code
    except Abort:
        sys.stderr.write("Aborted.\n")
        return 1
    return rv if isinstance(rv, int) else 0


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

app = typer.Typer(
    name="gitmem",
    help="Memory stores for AI agents, on plain git: versioned, attributed, redactable.",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    cls=GroupedGroup,
    context_settings=CONTEXT,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("gitmem-store")
        except PackageNotFoundError:  # run from a checkout that was never installed
            number = "unknown"
        typer.echo(f"gitmem {number}")
        raise typer.Exit(0)


@app.callback()
def _globals(
    home: Annotated[Path | None, typer.Option("--home", help="Workspace directory.")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="Actor for writes ($GITMEM_ACTOR).")] = None,
    session: Annotated[str | None, typer.Option("--session", help="Session id ($GITMEM_SESSION).")] = None,
    json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False,
    nl: Annotated[bool, typer.Option("--nl", help="Lists as newline-delimited JSON.")] = False,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="Log what happens to stderr (-vv: debug).")
    ] = 0,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of unexpected errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Memory stores for AI agents, on plain git: versioned, attributed, redactable."""
    common.GLOBALS = common.Globals(home=home, actor=actor, session=session, json=json, nl=nl, debug=debug)
    common.setup_logging(verbose)


def help_(
    command: Annotated[
        list[str] | None, typer.Argument(metavar="COMMAND", help="The command (and subcommand) to explain.")
    ] = None,
) -> None:
    """Show help for a command (gitmem help session sync), or for gitmem itself."""
    root = typer.main.get_command(app)
    _tidy(root, CONTEXT)
    ctx = root.make_context("gitmem", [], resilient_parsing=True)
    cmd: Command = root
    for name in command or []:
        sub = cmd.get_command(ctx, name) if isinstance(cmd, TyperGroup) else None
        if sub is None:
            raise common.fail(common.unknown("command", name, _names(cmd, ctx)), common.want_json(False))
        ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
        cmd = sub
    typer.echo(cmd.get_help(ctx))


def _names(cmd: Command, ctx: Context) -> list[str]:
    return cmd.list_commands(ctx) if isinstance(cmd, TyperGroup) else []


def completion(
    shell: Annotated[str, typer.Argument(help="bash, zsh, fish or powershell.")],
) -> None:
    """Print the shell completion script (eval "$(gitmem completion bash)"; or --install-completion)."""
    from typer._completion_shared import get_completion_script

    if shell not in ("bash", "zsh", "fish", "powershell", "pwsh"):
        raise common.fail(
            common.unknown("shell", shell, ["bash", "zsh", "fish", "powershell"]), common.want_json(False)
        )
    typer.echo(get_completion_script(prog_name="gitmem", complete_var="_GITMEM_COMPLETE", shell=shell))


# Each module defines ``register(app)``, which adds exactly the top-level commands named here (the
# root checks it when it loads the module); one line per module, in the order commands are listed.
COMMANDS: dict[str, tuple[str, ...]] = {
    "stores": ("store",),
    "memories": ("write", "create", "read", "ls", "edit", "rm", "mv"),
    "versions": ("log", "show", "diff", "restore", "reindex", "maintain"),
    "transfer": ("export", "import"),
    "search": ("search",),
    "hooks": ("hooks", "replica", "clone", "fetch"),
    "mcp": ("mcp",),
    "sessions": ("session", "revert-session"),
    "audit": ("redact", "audit", "verify", "prune"),
    "serve": ("serve",),
    "tokens": ("token",),
    "webhooks": ("webhook",),
    "review": ("review",),
    "tlog": ("receipt", "witness", "tlog"),
    "dreams": ("dream",),
    "cluster": ("cluster",),
}
MODULE_OF = {name: module for module, names in COMMANDS.items() for name in names}

app.command("help")(help_)
app.command("completion")(completion)


# ---------------------------------------------------------------------- the click command
METAVARS = {
    "store": "STORE",
    "scope": "SCOPE",
    "session": "SESSION",
    "actor": "ACTOR",
    "home": "DIR",
    "root": "DIR",
    "since": "DATE",
    "until": "DATE",
    "file": "FILE",
    "output": "FILE",
    "from_bundle": "FILE",
    "exclude": "PATTERN",
    "pattern": "REGEX",
    "if_sha256": "SHA256",
    "version": "VERSION",
    "memory": "MEMORY_ID",
    "status": "STATUS",
    "limit": "N",
    "depth": "N",
    "port": "PORT",
    "host": "HOST",
    "workers": "N",
    "debounce": "SECONDS",
    "poll": "SECONDS",
    "max_seconds": "SECONDS",
    "description": "TEXT",
    "text": "TEXT",
    "metadata": "KEY=VALUE",
    "instructions": "NAME=TEXT",
    "prefix": "PREFIX",
    "reason": "TEXT",
    "op": "OPERATION",
    "type": "TYPE",
}
ARGUMENT_NAMES = {"session_id": "SESSION", "clone_path": "CLONE", "token_id": "TOKEN_ID"}


def _tidy(cmd: Command, ctx_settings: dict[str, Any]) -> None:
    """Readable metavars (``--store STORE``, ``--since DATE``, ``PATH``) and ``-h`` everywhere."""
    cmd.context_settings = {**ctx_settings, **cmd.context_settings}
    _lazy_help_coercion(cmd)
    for param in cmd.params:
        _lazy_coercion(param)
        if param.param_type_name == "option":
            if param.is_flag or param.count or param.metavar is not None:
                continue
            if param.nargs > 1:
                param.metavar = " ".join(["VALUE"] * param.nargs)
                if param.name == "replace":
                    param.metavar = "OLD NEW"
                elif param.name == "insert":
                    param.metavar = "LINE TEXT"
                continue
            desc = getattr(param, "type_descriptor", None)
            choices = getattr(desc, "choices", None) or getattr(getattr(param, "type", None), "choices", None)
            if choices:
                param.metavar = "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"
                continue
            name = param.name or "value"
            param.metavar = METAVARS.get(name, name.upper().replace("_", "-"))
        elif param.param_type_name == "argument":
            _tidy_argument(param)
    if isinstance(cmd, GroupedGroup):  # help and completion; the lazy commands are tidied as they load
        subs = [sub for name, sub in cmd._commands.items() if name not in MODULE_OF]
    else:
        subs = list(getattr(cmd, "commands", {}).values())
    for sub in subs:
        _tidy(sub, ctx_settings)


class _LazyCoercion:
    """One parameter's value coercion, built only for a value that needs it.

    Recent typer coerces every parameter of the command that runs with a pydantic ``TypeAdapter``
    built on first use: importing pydantic for that is about a third of ``gitmem ls``'s start-up.
    An absent value is None (or ``()``) as typer's own coercion makes it, and a value that already
    is of a plain ``str`` or ``int`` parameter's type (no parser, no bounds: a string typed for
    ``str``, an ``int`` default) is that value, strings for a ``list[str]`` the list of them; any
    other goes to typer's coercion, unchanged.
    """

    def __init__(self, param: Any) -> None:
        self._descriptor = param.type_descriptor
        info = self._descriptor.parameter_info
        plain = getattr(info, "parser", None) is None and getattr(info, "min", None) is None
        plain = plain and getattr(info, "max", None) is None
        annotation = self._descriptor.annotation
        self._plain: type | None = annotation if plain and annotation in (str, int) else None
        self._strings = plain and get_origin(annotation) is list and get_args(annotation) == (str,)
        self._real: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:
            return () if multi else None
        if self._plain is not None and not multi and type(value) is self._plain:
            return value
        if self._strings and multi and isinstance(value, tuple | list) and all(type(v) is str for v in value):
            return list(value)
        if self._real is None:
            from typer._coercion import build_runtime_param

            self._real = build_runtime_param(self._descriptor)
        return self._real.coerce(value, param=param, ctx=ctx)


def _lazy_coercion(param: Any) -> None:
    """Typer's coercion deferred (see ``_LazyCoercion``) where this typer has it; else nothing."""
    if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
        param._runtime_param = _LazyCoercion(param)


def _lazy_help_coercion(cmd: Command) -> None:
    """The same for the ``-h`` option click makes (and keeps) on a command's first parse."""
    made = getattr(cmd, "get_help_option", None)
    if made is None or "get_help_option" in vars(cmd):
        return

    def get_help_option(ctx: Context) -> Any:
        option = made(ctx)
        if option is not None:
            _lazy_coercion(option)
        return option

    cmd.get_help_option = get_help_option


def _tidy_argument(param: Any) -> None:
    """``STORE``, ``[TEXT]``, ``COMMAND...`` in usage lines and help, without typer's ``<str>``."""
    name = param.metavar or ARGUMENT_NAMES.get(param.name or "", (param.name or "arg").upper())
    shown = name if param.required else f"[{name}]"
    if param.nargs != 1 and not shown.endswith("..."):
        shown += "..."
    param.metavar = name
    if hasattr(param, "_usage_display_name"):  # typer's own argument class (recent typer)
        param._usage_display_name = lambda: shown
        param.display_type_rich = lambda ctx=None: None


def main(args: list[str] | None = None) -> int:
    """Run the command line and return its exit code (``gitmem.cli.main`` exits with it)."""
    try:
        app(args=args, prog_name="gitmem")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
