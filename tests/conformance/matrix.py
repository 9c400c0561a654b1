"""The conformance matrix (docs/access.md): operations x faces x callers, with the outcome each
cell must have. ``test_conformance_matrix.py`` runs every cell that applies with the face's real
client and checks every other cell's reason; a face or operation of ``gitmem.model.caller`` with
no rows fails it.

Outcomes: ``allowed`` (published, attributed to the caller), ``proposed`` (the caller's open
proposal, the scope unchanged), ``refused`` with ``code`` (HTTP status, exit code, or ``git`` for a
push git reports as rejected), ``guard`` (refused by the store's guard), ``flagged`` (stored with
the secret masked and reported), ``hidden`` (a clone without the store's proposals; for
``case=proposals``, another caller's proposal neither listed nor shown: its page answers as an
unknown id's; for ``case=pending``, a reviewed dream listed and shown without its pending change's
path or reasoning), ``n/a`` (the
cell cannot apply: ``reason`` says why).
"""

from __future__ import annotations

from dataclasses import dataclass

from gitmem.model.caller import FACES, OPERATIONS

CALLERS = ("local", "ro", "rw", "scoped", "review", "admin", "redactor", "other", "none")


@dataclass(frozen=True)
class Cell:
    op: str
    face: str
    caller: str
    expect: str
    code: int | str | None = None
    reason: str = ""
    case: str = ""  # a variant of the operation (e.g. a secret in the path)

    @property
    def id(self) -> str:
        tail = f"-{self.case}" if self.case else ""
        return f"{self.face}:{self.op}:{self.caller}{tail}"


def _rows(text: str) -> list[Cell]:
    out = []
    for line in text.strip().splitlines():
        line = line.split("#", 1)[0].rstrip()
        if not line:
            continue
        op, face, caller, expect, *rest = line.split()
        code: int | str | None = None
        case = ""
        for r in rest:
            if r.startswith("case="):
                case = r[5:]
            elif r.isdigit():
                code = int(r)
            else:
                code = r
        out.append(Cell(op, face, caller, expect, code, case=case))
    return out


# op             face           caller    expect     code / case
RUN = _rows(
    """
create           library        local     allowed
create           library        review    proposed
create           library        ro        refused    6
create           library        scoped    refused    6
create           library        local     guard      case=secret-path      # bullet 4: a credential as a file name
update           library        review    proposed
rename           library        local     allowed
rename           library        local     guard      case=secret-path
delete           library        review    proposed
redact           library        local     allowed
redact           library        scoped    refused    6                     # bullet 3: another scope's history
redact           library        review    refused    6                     # bullet 3: review mode
redact           library        rw        refused    6                     # bullet 3: no redact right
redact           library        redactor  allowed
redact           library        local     guard      case=secret-reason    # the reason goes to the ledger: never redactable
restore          library        review    proposed
restore          library        scoped    refused    3                     # a version of another scope: not found
revert-session   library        review    proposed
search           library        local     allowed
list             library        local     allowed
review-accept    library        local     allowed
review-accept    library        review    refused    6
review-accept    library        local     guard      case=secret-reason    # the reason is kept with the decision

create           anthropic      rw        allowed
create           anthropic      review    proposed
create           anthropic      ro        refused    403
create           anthropic      other     refused    404                   # bullet 7: no existence oracle
create           anthropic      none      refused    401
create           anthropic      rw        refused    400   case=marker
update           anthropic      review    proposed
update           anthropic      rw        allowed
rename           anthropic      rw        allowed
delete           anthropic      rw        allowed
delete           anthropic      review    proposed
redact           anthropic      admin     allowed
redact           anthropic      rw        refused    403                   # bullet 3: no redact right
redact           anthropic      review    refused    403                   # bullet 3
redact           anthropic      scoped    refused    403                   # bullet 3: content also in main
redact           anthropic      ro        allowed    case=receipt          # a redaction's receipt: a reader of every scope
redact           anthropic      scoped    refused    403   case=receipt    # it also rewrote main: the whole entry or nothing
list             anthropic      rw        allowed
list             anthropic      other     refused    404                   # bullet 7
list             anthropic      none      refused    401
list             anthropic      rw        allowed    case=proposals        # the review API: a reviewer reads every proposal
list             anthropic      admin     allowed    case=proposals
list             anthropic      ro        hidden     case=proposals        # only its proposer and reviewers (docs/access.md)
list             anthropic      review    hidden     case=proposals        # another review token is no reviewer
review-accept    anthropic      rw        allowed
review-accept    anthropic      review    refused    403
review-accept    anthropic      rw        guard      case=secret-reason    # over the review API: screened by the engine

create           databricks     rw        allowed
create           databricks     review    proposed                         # bullet 1
create           databricks     ro        refused    403
create           databricks     other     refused    404
create           databricks     none      refused    401
create           databricks     rw        refused    400   case=marker     # bullet 7
create           databricks     rw        refused    408   case=slow-body  # bullet 7
update           databricks     review    proposed                         # bullet 1: PATCH
update           databricks     rw        allowed
delete           databricks     rw        allowed
delete           databricks     review    proposed
search           databricks     rw        allowed
list             databricks     rw        allowed
list             databricks     other     refused    404

create           mcp-http       rw        allowed
create           mcp-http       review    proposed                         # bullet 1
create           mcp-http       ro        refused    tool
create           mcp-http       none      refused    401
create           mcp-http       rw        allowed    case=claim-session    # bullet 6: the claim stays the token's
create           mcp-http       review    refused    403   case=other-session  # bullet 6: a token with a session
create           mcp-http       ro        refused    503   case=fill-cap   # bullet 6: one token, many sessions
list             mcp-http       rw        allowed
search           mcp-http       rw        allowed

create           mcp-stdio      local     allowed
create           mcp-stdio      review    proposed

clone            git-file       local     allowed
create           git-file       local     allowed
create           git-file       local     guard      case=secret-message   # bullet 4: a credential in a message
create           git-file       review    refused    git                   # bullet 2: acl.review on push

clone            git-http       admin     allowed
clone            git-http       rw        allowed
clone            git-http       ro        hidden                           # bullet 8: no refs/gitmem/proposals
clone            git-http       review    hidden                           # bullet 8
clone            git-http       other     refused    404
clone            git-http       none      refused    401
create           git-http       rw        allowed
create           git-http       review    refused    git                   # bullet 1: a --review token's push
create           git-http       ro        refused    403
create           git-http       admin     allowed    case=claim-session    # -o session=sesn_rw: its own namespace

restore          console        rw        allowed
restore          console        review    proposed                         # bullet 1
revert-session   console        review    proposed                         # bullet 1
revert-session   console        rw        allowed
redact           console        rw        refused    403
redact           console        review    refused    403
redact           console        admin     allowed
list             console        other     refused    404
list             console        rw        allowed    case=proposals        # the review pages: a reviewer
list             console        ro        hidden     case=proposals        # not counted, listed or shown (404)
list             console        review    hidden     case=proposals
list             console        rw        allowed    case=pending          # a dream's page: its pending changes
list             console        ro        hidden     case=pending          # to its proposal's readers only
list             console        review    hidden     case=pending
clone            console        ro        refused    403   case=verify     # bullet 7: verify for admins only
clone            console        admin     allowed    case=verify

create           openai-agents  local     allowed
create           openai-agents  local     flagged    case=secret           # bullet 5: the turn is kept
create           langgraph      local     allowed
create           langgraph      local     flagged    case=secret           # bullet 5
create           cli            local     allowed
create           cli            review    proposed                         # acl.review names the actor
create           cli            local     guard      case=secret-path
update           cli            local     allowed
rename           cli            local     allowed
delete           cli            local     allowed
redact           cli            local     allowed
redact           cli            local     guard      case=secret-reason
review-accept    cli            local     allowed
restore          cli            local     allowed
revert-session   cli            local     allowed
search           cli            local     allowed
list             cli            local     allowed
clone            cli            local     allowed

create           memory-tool    local     allowed
create           memory-tool    local     guard      case=secret-path
update           memory-tool    local     allowed
rename           memory-tool    local     allowed
delete           memory-tool    local     allowed
list             memory-tool    local     allowed
search           memory-tool    local     allowed                          # the memory_search extension
search           memory-tool    ro        allowed                          # a reader's caller on the backend
search           memory-tool    scoped    allowed                          # a tool on team: team's hits only
search           memory-tool    scoped    refused    tool  case=other-scope  # a tool on main, caller confined to team

create           session-sync   local     allowed
create           session-sync   review    proposed                         # a notes:review mount
create           session-sync   ro        refused    sync                  # a notes:ro mount
update           session-sync   local     allowed
update           session-sync   review    proposed
rename           session-sync   local     allowed
delete           session-sync   local     allowed
delete           session-sync   review    proposed
list             session-sync   local     allowed
revert-session   session-sync   local     allowed

update           mcp-http       rw        allowed
update           mcp-http       review    proposed
update           mcp-http       ro        refused    tool
rename           mcp-http       rw        allowed
rename           mcp-http       review    proposed
delete           mcp-http       rw        allowed
delete           mcp-http       review    proposed
delete           mcp-http       scoped    refused    tool                  # confined to team
list             mcp-http       other     refused    tool                  # another store's token

update           mcp-stdio      local     allowed
update           mcp-stdio      review    proposed
rename           mcp-stdio      local     allowed
delete           mcp-stdio      local     allowed
delete           mcp-stdio      review    proposed
search           mcp-stdio      local     allowed
list             mcp-stdio      local     allowed

update           git-file       local     allowed
rename           git-file       local     allowed
delete           git-file       local     allowed

update           git-http       rw        allowed
update           git-http       review    refused    git
rename           git-http       rw        allowed
delete           git-http       rw        allowed
delete           git-http       ro        refused    403

clone            git-ssh        rw        allowed
clone            git-ssh        ro        hidden                           # bullet 8 over gitolite
clone            git-ssh        review    hidden
clone            git-ssh        other     refused    denied
clone            git-ssh        none      refused    auth
create           git-ssh        rw        allowed
create           git-ssh        review    refused    git                   # bullet 2: acl.review on push
create           git-ssh        ro        refused    denied
create           git-ssh        rw        allowed    case=claim-session
update           git-ssh        rw        allowed
rename           git-ssh        rw        allowed
delete           git-ssh        rw        allowed

review-accept    console        rw        allowed
review-accept    console        review    refused    404                   # another's proposal: not even its page (docs/access.md)
search           console        rw        allowed
search           console        other     refused    404

update           openai-agents  local     allowed                          # pop_item
delete           openai-agents  local     allowed                          # clear_session
list             openai-agents  local     allowed                          # get_items
update           langgraph      local     allowed
delete           langgraph      local     allowed
search           langgraph      local     allowed
list             langgraph      local     allowed

create           conversations  rw        allowed
create           conversations  review    proposed
create           conversations  ro        refused    403
create           conversations  scoped    refused    403
create           conversations  other     refused    404
create           conversations  none      refused    401
update           conversations  rw        allowed
update           conversations  review    proposed
update           conversations  ro        refused    403
delete           conversations  rw        allowed
delete           conversations  review    proposed
list             conversations  ro        allowed
list             conversations  other     refused    404

create           responses      rw        allowed
create           responses      review    proposed
create           responses      ro        refused    403
create           responses      other     refused    404
create           responses      none      refused    401

create           dreams         rw        allowed
create           dreams         review    proposed                         # a review token's dream is reviewed
create           dreams         ro        refused    403                   # update_existing needs write
create           dreams         other     refused    404                   # no existence oracle
create           dreams         other     refused    404   case=unknown-store
create           dreams         none      refused    401
create           dreams         admin     refused    403   case=acl-write  # acl.write shuts the requester out: no dream publishes for it
list             dreams         rw        allowed
list             dreams         other     hidden
list             dreams         rw        allowed    case=pending          # a reviewed dream's pending change: a reviewer reads it
list             dreams         admin     allowed    case=pending
list             dreams         ro        hidden     case=pending          # only its proposal's readers (docs/dreams.md)
list             dreams         review    hidden     case=pending          # a --review token is no reviewer

webhooks         anthropic      admin     allowed                          # the admin API beside it: list, create, test, enable, delete
webhooks         anthropic      admin     refused    403   case=private    # allow_private needs GITMEM_WEBHOOK_ALLOW_PRIVATE=1; 127.0.0.1 is SSRF
webhooks         anthropic      ro        refused    403                   # admin tokens only, for every call
webhooks         anthropic      rw        refused    403
webhooks         anthropic      scoped    refused    403
webhooks         anthropic      review    refused    403
webhooks         anthropic      redactor  refused    403
webhooks         anthropic      other     refused    403                   # no store is named: no existence oracle to keep
webhooks         anthropic      none      refused    401
webhooks         cli            local     allowed                          # gitmem webhook add|list|test|enable|remove
webhooks         cli            local     refused    6     case=private    # 127.0.0.1 without --allow-private
webhooks         library        local     allowed                          # gitmem.webhooks
"""
)

WEBHOOKS_NA = (
    "webhook endpoints are configured by an admin only: the server's admin API (admin tokens) "
    "or the CLI and library on the server's machine; this face has no such verb"
)

# Cells that cannot apply, each with the reason the test checks is given.
NA = (
    [
        Cell("*", face, c, "n/a", reason=f"the {face} has no token: whoever opens the repository is trusted")
        for face in ("library", "cli")
        for c in ("other", "none")
    ]
    + [
        Cell(op, face, "*", "n/a", reason=why)
        for face, ops, why in (
            ("databricks", ("rename",), "the Databricks entries API has no rename"),
            (
                "databricks",
                ("redact", "restore", "revert-session", "review-accept", "clone"),
                "the Databricks entries API has no such endpoint",
            ),
            (
                "anthropic",
                ("restore", "revert-session", "clone", "search"),
                "the Anthropic memory API has no such endpoint",
            ),
            (
                "mcp-http",
                ("redact", "restore", "revert-session", "review-accept", "clone"),
                "no MCP tool does this (review tools are --reviewer only)",
            ),
            (
                "mcp-stdio",
                ("redact", "restore", "revert-session", "review-accept", "clone"),
                "no MCP tool does this (review tools are --reviewer only)",
            ),
            (
                "git-file",
                ("redact", "restore", "revert-session", "review-accept", "search", "list"),
                "git transfers commits; it has no such verb",
            ),
            (
                "git-http",
                ("redact", "restore", "revert-session", "review-accept", "search", "list"),
                "git transfers commits; it has no such verb",
            ),
            (
                "git-ssh",
                ("redact", "restore", "revert-session", "review-accept", "search", "list"),
                "git transfers commits; it has no such verb",
            ),
            (
                "openai-agents",
                ("rename", "redact", "restore", "revert-session", "review-accept", "search", "clone"),
                "the Agents Session protocol has no such verb",
            ),
            (
                "langgraph",
                ("rename", "redact", "restore", "revert-session", "review-accept", "clone"),
                "the LangGraph BaseStore has no such verb",
            ),
            (
                "memory-tool",
                ("redact", "restore", "revert-session", "review-accept", "clone"),
                "the memory tool's commands have no such verb",
            ),
        )
        for op in ops
    ]
    + [
        Cell("webhooks", face, "*", "n/a", reason=WEBHOOKS_NA)
        for face in FACES
        if face not in ("anthropic", "cli", "library", "cluster-proxy")  # the proxy: every operation n/a
    ]
    + [
        Cell(op, face, "*", "n/a", reason=why)
        for face, ops, why in (
            (
                "session-sync",
                ("redact", "restore", "review-accept", "search", "clone"),
                "a session mount syncs files; it has no such verb",
            ),
            (
                "conversations",
                ("rename", "redact", "restore", "revert-session", "review-accept", "search", "clone"),
                "the OpenAI conversations API has no such endpoint",
            ),
            (
                "responses",
                (
                    "update",
                    "rename",
                    "delete",
                    "redact",
                    "restore",
                    "revert-session",
                    "review-accept",
                    "search",
                    "list",
                    "clone",
                ),
                "the responses proxy only appends a turn to a conversation (create); the rest is the conversations API",
            ),
            (
                "dreams",
                (
                    "update",
                    "rename",
                    "delete",
                    "redact",
                    "restore",
                    "revert-session",
                    "review-accept",
                    "search",
                    "clone",
                ),
                "a dream is started and listed; its changes land as a proposal its reviewers decide (review rows)",
            ),
            (
                "cluster-proxy",
                OPERATIONS,
                "the cluster proxy forwards every request unchanged to the store's home node, whose faces decide",
            ),
            (
                "console",
                ("create", "update", "rename", "delete"),
                "the console edits nothing: it browses, restores, reverts, redacts and reviews",
            ),
        )
        for op in ops
    ]
)
