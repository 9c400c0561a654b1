"""The memory tool's path and text rules: ``/memories/<p>`` to store paths, line numbering, sizes.

Kept apart from :mod:`gitmem.integrations.anthropic_tool` (the backend and the SDK classes); the
messages are those of the SDK's reference ``BetaLocalFilesystemMemoryTool``.
"""

from __future__ import annotations

import posixpath
from typing import TypeVar
from urllib.parse import unquote

from anthropic.tools import ToolError

from gitmem.errors import InvalidInputError
from gitmem.model.paths import validate_path

ROOT = "/memories"
MAX_LINES = 999999
LINE_NUMBER_WIDTH = len(str(MAX_LINES))
_EDIT_ATTEMPTS = 8
T = TypeVar("T")


def format_size(size: int) -> str:
    """Human-readable size, exactly as the SDK's reference implementation formats it."""
    if size == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min(int(size.bit_length() - 1) // 10, len(units) - 1)
    value = size / (1024**i)
    return f"{int(value)}{units[i]}" if value == int(value) else f"{value:.1f}{units[i]}"


def _split_lines_keeping_cr(content: str) -> list[str]:
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _numbered(lines: list[str], start: int) -> str:
    return "\n".join(f"{str(i + start).rjust(LINE_NUMBER_WIDTH)}\t{line}" for i, line in enumerate(lines))


def _has_dotdot(text: str) -> bool:
    return ".." in text.replace("\\", "/").split("/")


def to_store_path(path: str) -> str:
    """The store path (``/a/b``) of a memory tool path (``/memories/a/b``); ``/`` for the root.

    Raises:
        ToolError: for paths outside ``/memories``, traversal, and paths that break gitmem's rules.
    """
    if not path.startswith(ROOT) or (len(path) > len(ROOT) and path[len(ROOT)] != "/"):
        raise ToolError(f"Path must start with /memories, got: {path}")
    rest = path[len(ROOT) :]
    if _has_dotdot(rest):
        normal = posixpath.normpath(path)
        if normal != ROOT and not normal.startswith(ROOT + "/"):
            raise ToolError(f"Path {path} would escape /memories directory")
        raise ToolError(f"Path {path} contains '..' segments, which are not allowed")
    decoded = rest
    for _ in range(3):  # double and triple encoding too
        decoded = unquote(decoded)
        if _has_dotdot(decoded):
            raise ToolError(f"Path {path} would escape /memories directory")
    segments = [s for s in rest.split("/") if s not in ("", ".")]
    if not segments:
        return "/"
    store_path = "/" + "/".join(segments)
    try:
        validate_path(store_path)
    except InvalidInputError as exc:
        raise ToolError(f"Invalid path {path}: {exc.message}") from None
    return store_path
