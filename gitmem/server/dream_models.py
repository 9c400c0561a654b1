"""The model a dream talks to (docs/dreams.md#the-dreamer): the Anthropic Messages API (the
``anthropic`` SDK, Claude's memory tool), or an OpenAI-compatible chat completions endpoint (the
``openai`` SDK, the same commands as one ``memory`` function). Both keep the conversation and
answer each turn as a :class:`Turn`: the text the model wrote, its tool calls, its token counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

MAX_TOKENS = 4096
SYSTEM = (
    "You consolidate a memory store. The memory tool works on it (/memories is its root). Read the "
    "store and the versions the past sessions wrote, then reorganize the store: merge duplicates "
    "into one memory, replace stale or contradicted facts with the latest value, and add insights "
    "the sessions surfaced. Before each change, say in one sentence why you make it. Never store "
    "secrets or credentials. Stop when the store is consolidated."
)
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"],
}
SEARCH_TOOL: dict[str, Any] = {
    "name": "search_memories",
    "description": "Full-text search of the store's memories; returns paths and snippets, best first.",
    "input_schema": SEARCH_SCHEMA,
}
MEMORY_TOOL: dict[str, Any] = {"type": "memory_20250818", "name": "memory"}
BETAS = ["context-management-2025-06-27"]
# The memory tool's commands as one function, for endpoints without Claude's built-in tool.
MEMORY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {
            "type": "string",
            "enum": ["view", "create", "str_replace", "insert", "delete", "rename"],
        },
        "path": {"type": "string", "description": "a path under /memories"},
        "view_range": {"type": "array", "items": {"type": "integer"}},
        "file_text": {"type": "string"},
        "old_str": {"type": "string"},
        "new_str": {"type": "string"},
        "insert_line": {"type": "integer"},
        "insert_text": {"type": "string"},
        "old_path": {"type": "string"},
        "new_path": {"type": "string"},
    },
    "required": ["command"],
}
USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


@dataclass
class Call:
    id: str
    name: str
    input: Any


@dataclass
class Turn:
    reasoning: str
    calls: list[Call]
    usage: dict[str, int]
    done: bool  # the model stopped calling tools
    messages: list[dict[str, Any]] = field(default_factory=list)


class AnthropicModel:
    """``client.beta.messages.create`` with Claude's memory tool."""

    def __init__(self, client: Any, model: str, first: str) -> None:
        self.client = client
        self.model = model
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": first}]

    def turn(self) -> Turn:
        reply = self.client.beta.messages.create(
            model=self.model,
            max_tokens=MAX_TOKENS,
            system=SYSTEM,
            tools=[MEMORY_TOOL, SEARCH_TOOL],
            messages=self.messages,
            betas=BETAS,
        )
        self.messages.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
        )
        reasoning = " ".join(b.text.strip() for b in reply.content if b.type == "text").strip()
        calls = [Call(b.id, b.name, b.input) for b in reply.content if b.type == "tool_use"]
        usage = {k: int(getattr(reply.usage, k, 0) or 0) for k in USAGE_KEYS}
        return Turn(reasoning, calls, usage, reply.stop_reason != "tool_use" or not calls)

    def results(self, outputs: list[tuple[Call, str, bool]]) -> None:
        self.messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": text, "is_error": is_error}
                    for c, text, is_error in outputs
                ],
            }
        )


class OpenAIModel:
    """``client.chat.completions.create`` at an OpenAI-compatible endpoint, with function tools."""

    def __init__(self, client: Any, model: str, first: str) -> None:
        self.client = client
        self.model = model
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": first},
        ]
        self.tools = [
            {
                "type": "function",
                "function": {
                    "name": "memory",
                    "description": "The memory tool.",
                    "parameters": MEMORY_SCHEMA,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "search_memories",
                    "description": SEARCH_TOOL["description"],
                    "parameters": SEARCH_SCHEMA,
                },
            },
        ]

    def turn(self) -> Turn:
        reply = self.client.chat.completions.create(
            model=self.model, messages=self.messages, tools=self.tools
        )
        message = reply.choices[0].message
        calls = []
        for tc in message.tool_calls or []:
            try:
                data: Any = json.loads(tc.function.arguments or "{}")
            except ValueError:
                data = tc.function.arguments  # not an object: the dreamer answers with an error
            calls.append(Call(tc.id, tc.function.name, data))
        self.messages.append(message.model_dump(exclude_none=True))
        u = reply.usage
        usage = {k: 0 for k in USAGE_KEYS}
        if u is not None:
            usage["input_tokens"] = int(u.prompt_tokens or 0)
            usage["output_tokens"] = int(u.completion_tokens or 0)
        return Turn((message.content or "").strip(), calls, usage, not calls)

    def results(self, outputs: list[tuple[Call, str, bool]]) -> None:
        for c, text, is_error in outputs:
            self.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": c.id,
                    "content": ("Error: " if is_error and not text.startswith("Error") else "") + text,
                }
            )


def client(provider: str, base_url: str | None, api_key: str | None, *, timeout: float = 300.0) -> Any:
    """The SDK client of ``provider`` (``anthropic`` or ``openai``) at ``base_url``; ``timeout``
    seconds per request (``GITMEM_DREAM_TIMEOUT``)."""
    if provider == "openai":
        import openai

        return openai.OpenAI(base_url=base_url, api_key=api_key or "unset", max_retries=2, timeout=timeout)
    import anthropic

    return anthropic.Anthropic(base_url=base_url, api_key=api_key or "unset", max_retries=2, timeout=timeout)


def conversation(provider: str, sdk_client: Any, model: str, first: str) -> AnthropicModel | OpenAIModel:
    return (OpenAIModel if provider == "openai" else AnthropicModel)(sdk_client, model, first)
