"""The system-prompt block: what an agent needs to know about the stores mounted for it."""

from __future__ import annotations

from gitmem.sessions.state import Session

PROMPT_FILE = "SYSTEM_PROMPT.md"
_ACCESS = {
    "rw": "read-write",
    "ro": "read-only",
    "review": "read-write, reviewed (your changes are proposals until a reviewer accepts them)",
}


def system_prompt(session: Session) -> str:
    """The block for ``session``: per store its name, mount path, access, description, instructions."""
    n = len(session.mounts)
    lines = [
        "# Memory stores",
        "",
        f"Session {session.id} has {n} memory store{'s' if n != 1 else ''} mounted as directories. "
        "Each file in them is one memory; read them before you start, and keep what you learn there.",
        "",
    ]
    for m in session.mounts:
        lines.append(f"## {m.name or m.store}" + (f" (scope {m.scope})" if m.scope != "main" else ""))
        lines.append(f"- Path: {m.path}")
        lines.append(f"- Access: {_ACCESS[m.access]}")
        if m.at:
            when = m.shows or "before its first version"
            lines.append(
                f"- Shows: the store as it was at {m.at} (the state of {when}), not as it is now; "
                "nothing here can be changed"
            )
        if m.description:
            lines.append(f"- Description: {m.description}")
        if m.instructions:
            lines.append(f"- Instructions: {m.instructions}")
        lines.append("")
    lines += [
        "## How changes are saved",
        "Create, edit, delete and rename files in read-write stores with your usual file tools. When the "
        "session syncs (`gitmem session sync`, or at its end) every changed file becomes a new version "
        "of that memory, attributed to this session; earlier versions are kept. Do not change files in "
        "read-only stores: such changes are refused and never saved. If someone else changed a file you "
        f"also changed, your version is kept beside it as `<name>.conflict-{session.id}`, in this "
        "mount only (it is never saved: merge it into the file, then delete it). The "
        "`.gitmem/` directory of each mount belongs to gitmem.",
        "",
    ]
    return "\n".join(lines)
