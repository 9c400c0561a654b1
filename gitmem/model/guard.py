"""The write-time guard's pure part: its policy (the ``guard`` key of ``gitmem.yaml``), :func:`scan`
finding secrets, PII and the store's own patterns in a memory's text, and :func:`decide` turning the
findings into what the write does (refuse, store with a flag, or nothing).

No I/O and no printing. A :class:`Finding` names the rule, the line and the column, and carries a
masked preview: never the matched text itself, so a refusal message can quote it safely. Rules and
their limits are written down in ``docs/guard.md``.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gitmem.errors import ConfigError

if TYPE_CHECKING:
    from gitmem.model.guard_memo import CleanParagraphs
    from gitmem.model.guard_rules import Hit

# The rule modules compile their tables on import (about 20 ms): they load on the first scan, so
# that reading settings (every CLI command, the pre-receive hook) stays cheap.

Kind = Literal["secret", "pii", "pattern"]
Action = Literal["reject", "flag", "none"]
SECRET_MODES = ("reject", "flag", "off")
PII_MODES = ("flag", "off")
PATTERN_ACTIONS = ("reject", "flag")
PII_RULES = ("email", "phone-number", "card-number", "iban")
MAX_PATTERNS = 64
MAX_REGEX = 1024
MAX_FINDINGS = 100  # a scan stops collecting here: enough to refuse or flag, bounded work
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def all_rules() -> tuple[str, ...]:
    """Every built-in rule id: the secret rules, then the PII rules."""
    from gitmem.model.guard_rules import RULE_IDS

    return RULE_IDS + PII_RULES


def __getattr__(name: str) -> Any:
    if name == "ALL_RULES":  # kept as a module attribute, computed on first use
        return all_rules()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class GuardPattern:
    """An extra rule of the store: a named regex; a match is a ``pattern:<name>`` finding."""

    name: str
    regex: str
    action: Literal["reject", "flag"] = "reject"


@dataclass(frozen=True)
class AllowEntry:
    """A finding the store accepts: ``exact`` matched text, a ``regex`` the whole matched text
    matches, or a whole ``rule`` switched off."""

    kind: Literal["exact", "regex", "rule"]
    value: str

    def to_data(self) -> str | dict[str, str]:
        return self.value if self.kind == "exact" else {self.kind: self.value}


@dataclass(frozen=True)
class GuardPolicy:
    """What the guard checks and what a finding does to a write.

    Attributes:
        secrets: ``reject`` (default) refuses a write holding a credential, ``flag`` stores it with a
            flag, ``off`` skips the secret rules.
        pii: ``flag`` flags a write holding personal data; ``off`` (default) skips the PII rules.
        patterns: the store's own named regexes, each rejecting or flagging.
        allow: findings to let through (exact text, regex or rule id).
        deny_patterns: regexes remembered by redactions; a match always rejects.
    """

    secrets: Literal["reject", "flag", "off"] = "reject"
    pii: Literal["flag", "off"] = "off"
    patterns: tuple[GuardPattern, ...] = ()
    allow: tuple[AllowEntry, ...] = ()
    deny_patterns: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Any, where: str) -> GuardPolicy:
        """Validate the parsed ``guard`` mapping; errors name ``where`` (the file) and the key."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: key 'guard' must be a mapping")
        for key in data:
            if key not in {"secrets", "pii", "patterns", "allow", "deny_patterns"}:
                raise ConfigError(f"{where}: unknown key 'guard.{key}'")
        return cls(
            secrets=_choice(where, "guard.secrets", data.get("secrets", "reject"), SECRET_MODES),
            pii=_choice(where, "guard.pii", data.get("pii", "off"), PII_MODES),
            patterns=_patterns(where, data.get("patterns")),
            allow=_allow(where, data.get("allow")),
            deny_patterns=tuple(
                _regex(where, f"guard.deny_patterns[{n}]", v)
                for n, v in enumerate(_list(where, "guard.deny_patterns", data.get("deny_patterns")))
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The mapping :meth:`from_dict` reads back to an equal policy."""
        return {
            "secrets": self.secrets,
            "pii": self.pii,
            "patterns": [{"name": p.name, "regex": p.regex, "action": p.action} for p in self.patterns],
            "allow": [a.to_data() for a in self.allow],
            "deny_patterns": list(self.deny_patterns),
        }


def _choice(where: str, key: str, value: Any, choices: tuple[str, ...]) -> Any:
    if value not in choices or not isinstance(value, str):
        raise ConfigError(f"{where}: key '{key}' must be one of {', '.join(choices)}, got {value!r}")
    return value


def _list(where: str, key: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: key '{key}' must be a list")
    if len(value) > MAX_PATTERNS:
        raise ConfigError(f"{where}: key '{key}' has {len(value)} entries; at most {MAX_PATTERNS}")
    return value


def _regex(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_REGEX:
        raise ConfigError(f"{where}: key '{key}' must be a regex of 1-{MAX_REGEX} characters")
    try:
        compiled = re.compile(value)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ConfigError(f"{where}: key '{key}' is not a valid regex: {exc}") from None
    if compiled.search(""):
        raise ConfigError(f"{where}: key '{key}' matches the empty string (it would match everywhere)")
    return value


def _patterns(where: str, value: Any) -> tuple[GuardPattern, ...]:
    out: list[GuardPattern] = []
    for n, item in enumerate(_list(where, "guard.patterns", value)):
        key = f"guard.patterns[{n}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: key '{key}' must be a mapping with name and regex")
        for k in item:
            if k not in {"name", "regex", "action"}:
                raise ConfigError(f"{where}: unknown key '{key}.{k}'")
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: key '{key}.name' must be 1-64 of a-z, 0-9, '_', '.', '-'")
        if any(p.name == name for p in out):
            raise ConfigError(f"{where}: key '{key}.name': {name!r} is used twice")
        regex = _regex(where, f"{key}.regex", item.get("regex"))
        action = _choice(where, f"{key}.action", item.get("action", "reject"), PATTERN_ACTIONS)
        out.append(GuardPattern(name, regex, action))
    return tuple(out)


def _allow(where: str, value: Any) -> tuple[AllowEntry, ...]:
    out: list[AllowEntry] = []
    for n, item in enumerate(_list(where, "guard.allow", value)):
        key = f"guard.allow[{n}]"
        if isinstance(item, str) and item:
            out.append(AllowEntry("exact", item))
            continue
        if not isinstance(item, dict) or len(item) != 1:
            raise ConfigError(f"{where}: key '{key}' must be a string, or a mapping of one of regex, rule")
        ((kind, text),) = item.items()
        if kind == "regex":
            out.append(AllowEntry("regex", _regex(where, f"{key}.regex", text)))
        elif kind == "rule":
            if text not in all_rules():
                raise ConfigError(f"{where}: key '{key}.rule': unknown rule {text!r} (see docs/guard.md)")
            out.append(AllowEntry("rule", text))
        else:
            raise ConfigError(f"{where}: unknown key '{key}.{kind}'")
    return tuple(out)


@dataclass(frozen=True)
class Finding:
    """One thing the guard found: which rule, where (1-based line and column, character offsets
    ``start``/``end`` into the text), and a masked ``preview`` that never holds the matched text."""

    rule: str
    kind: Kind
    line: int
    column: int
    start: int
    end: int
    preview: str

    def describe(self) -> str:
        """E.g. ``secret github-token at line 3, column 9 (ghp_… (40 chars))``: safe to show."""
        return f"{self.kind} {self.rule} at line {self.line}, column {self.column} ({self.preview})"


@dataclass(frozen=True)
class _Compiled:
    patterns: tuple[tuple[GuardPattern, re.Pattern[str]], ...]
    deny: tuple[re.Pattern[str], ...]
    exact: frozenset[str]
    regexes: tuple[re.Pattern[str], ...]
    rules_off: frozenset[str]


@functools.lru_cache(maxsize=64)
def _compiled(policy: GuardPolicy) -> _Compiled:
    return _Compiled(
        patterns=tuple((p, re.compile(p.regex)) for p in policy.patterns),
        deny=tuple(re.compile(p) for p in policy.deny_patterns),
        exact=frozenset(a.value for a in policy.allow if a.kind == "exact"),
        regexes=tuple(re.compile(a.value) for a in policy.allow if a.kind == "regex"),
        rules_off=frozenset(a.value for a in policy.allow if a.kind == "rule"),
    )


def _allowed(hit: Hit, text: str, c: _Compiled) -> bool:
    if hit.rule in c.rules_off:
        return True
    whole = text[hit.start : hit.end]
    if hit.value in c.exact or whole in c.exact:
        return True
    return any(r.fullmatch(hit.value) or r.fullmatch(whole) for r in c.regexes)


def _custom_hits(text: str, c: _Compiled) -> list[Hit]:
    from gitmem.model.guard_rules import Hit, mask

    hits: list[Hit] = []
    for n, regex in enumerate(c.deny):
        for m in regex.finditer(text):
            if m.end() > m.start():
                hits.append(Hit(f"deny:{n}", "pattern", m.start(), m.end(), m.group(), mask(m.group()), -1))
            if len(hits) >= MAX_FINDINGS:
                return hits
    for pattern, regex in c.patterns:
        for m in regex.finditer(text):
            if m.end() > m.start():
                rule = f"pattern:{pattern.name}"
                hits.append(Hit(rule, "pattern", m.start(), m.end(), m.group(), mask(m.group()), -1))
            if len(hits) >= MAX_FINDINGS:
                return hits
    return hits


def _without_overlaps(hits: list[Hit]) -> list[Hit]:
    """Keep the best-ranked hit of each overlapping group (a JWT is not also a high-entropy string).

    Hits are taken best first; one is kept when it overlaps no kept hit. Kept hits never overlap
    each other, so in start order their ends ascend too, and a hit overlaps one of them exactly
    when the last kept hit starting before its end ends after its start: a bisection per hit
    (many hits cost n log n, not n squared)."""
    if len(hits) < 2:
        return list(hits)
    starts: list[int] = []  # of the kept hits, ascending
    kept: list[Hit] = []  # in the same order
    for hit in sorted(hits, key=lambda h: (h.rank, h.start)):
        k = bisect.bisect_left(starts, hit.end)
        if k and kept[k - 1].end > hit.start:
            continue
        starts.insert(k, hit.start)
        kept.insert(k, hit)
    return kept


def scan(
    text: str, policy: GuardPolicy | None = None, *, memo: CleanParagraphs | None = None
) -> list[Finding]:
    """The findings in ``text`` under ``policy`` (default: :class:`GuardPolicy()`), in text order;
    at most :data:`MAX_FINDINGS`, allow-listed ones left out.

    ``memo`` (a :class:`~gitmem.model.guard_memo.CleanParagraphs`): paragraphs found clean by
    earlier scans with it are not looked at again, and those found clean now are added; the
    findings are the same with or without it (docs/guard.md#speed)."""
    policy = policy or GuardPolicy()
    compiled = _compiled(policy)
    hits = _custom_hits(text, compiled)
    capped = len(hits) >= MAX_FINDINGS  # the store's patterns stopped early: their later matches unseen
    if policy.secrets != "off" or policy.pii != "off":
        from gitmem.model.guard_memo import ScanRecord, remember
        from gitmem.model.guard_rules import ascii_view
        from gitmem.model.guard_secrets import secret_hits

        data = ascii_view(text)
        secrets, pii = (ScanRecord(), ScanRecord()) if memo is not None else (None, None)
        if policy.secrets != "off":
            hits.extend(secret_hits(data, memo.secrets if memo is not None else None, secrets))
        if policy.pii != "off":
            from gitmem.model.guard_pii import pii_hits

            hits.extend(pii_hits(data, memo.pii if memo is not None else None, pii))
        if memo is not None and secrets is not None and pii is not None and not capped:
            withheld = secrets.withheld  # a paragraph any rule found anything in is kept by none
            pii.withheld = withheld
            remember(memo.secrets, secrets, hits)
            remember(memo.pii, pii, hits)
    kept = [h for h in _without_overlaps(hits) if not _allowed(h, text, compiled)][:MAX_FINDINGS]
    return [_finding(text, h) for h in kept]


def _finding(text: str, hit: Hit) -> Finding:
    line_start = text.rfind("\n", 0, hit.start) + 1
    line = text.count("\n", 0, hit.start) + 1
    kind: Kind = hit.kind  # type: ignore[assignment]
    return Finding(hit.rule, kind, line, hit.start - line_start + 1, hit.start, hit.end, hit.preview)


_SEVERITY = {"none": 0, "flag": 1, "reject": 2}


def action_for(finding: Finding, policy: GuardPolicy) -> Action:
    """What one finding does under ``policy``."""
    if finding.kind == "secret":
        return "none" if policy.secrets == "off" else policy.secrets
    if finding.kind == "pii":
        return "flag" if policy.pii == "flag" else "none"
    if finding.rule.startswith("pattern:"):
        name = finding.rule.removeprefix("pattern:")
        return next((p.action for p in policy.patterns if p.name == name), "reject")
    return "reject"  # deny patterns of redactions, and anything unknown


def decide(findings: list[Finding], policy: GuardPolicy) -> Action:
    """``reject`` if any finding rejects, else ``flag`` if any flags, else ``none``."""
    best: Action = "none"
    for finding in findings:
        action = action_for(finding, policy)
        if _SEVERITY[action] > _SEVERITY[best]:
            best = action
    return best
