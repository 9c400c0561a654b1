"""True positives of the write-time guard: at least one per rule, each in a line of ordinary text.

The fake secrets have the right shape (published prefix, length, alphabet) but are built here from a
seeded random generator, so no real-looking secret is stored in the repository as a literal (nothing
for a secret scanner to trip on, and nothing that works anywhere).
"""

from __future__ import annotations

import base64
import json
import random
import string
from typing import NamedTuple

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"
BASE32 = string.ascii_uppercase + "234567"


class Positive(NamedTuple):
    rule: str
    text: str
    secret: str  # the part that must be found and must never appear in a preview


def _rand(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    classes = [
        c for c in (string.digits, string.ascii_uppercase, string.ascii_lowercase) if set(c) & set(alphabet)
    ]
    while True:  # shaped like a real key: every class of the alphabet present
        s = "".join(rng.choice(alphabet) for _ in range(n))
        if n < 12 or all(set(s) & set(c) for c in classes):
            return s


def _luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for check in string.digits:
        digits = body + check
        total = 0
        for n, ch in enumerate(reversed(digits)):
            d = int(ch) * (2 if n % 2 else 1)
            total += d - 9 if d > 9 else d
        if total % 10 == 0:
            return digits
    raise AssertionError("unreachable")


def _iban(country: str, bban: str) -> str:
    moved = bban + country + "00"
    check = 98 - int("".join(str(int(ch, 36)) for ch in moved)) % 97
    return f"{country}{check:02d}{bban}"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def positives(seed: int = 19) -> list[Positive]:
    rng = random.Random(seed)
    r = lambda n, a=ALNUM: _rand(rng, n, a)  # noqa: E731
    out: list[Positive] = []

    def add(rule: str, template: str, secret: str) -> None:
        out.append(Positive(rule, template.format(s=secret), secret))

    add("aws-access-key-id", "aws_access_key_id = {s}", "AKIA" + r(16, BASE32))
    add("aws-access-key-id", "temporary credentials: {s} (expires tonight)", "ASIA" + r(16, BASE32))
    add("aws-secret-access-key", "AWS_SECRET_ACCESS_KEY={s}", r(40, B64))
    add("aws-secret-access-key", "the aws secret for staging is {s}", r(40, B64))
    add("gcp-api-key", "maps key: {s}", "AIza" + r(35, B64URL))
    add("google-oauth-client-secret", "client_secret_id {s}", "GOCSPX-" + r(28, B64URL))
    add("google-oauth-token", "Authorization: Bearer {s}", "ya29." + r(80, B64URL))
    body = "\\n".join(r(64, B64) for _ in range(6))
    key = f"-----BEGIN PRIVATE KEY-----\\n{body}\\n-----END PRIVATE KEY-----\\n"
    sa = {"type": "service_account", "project_id": "demo", "private_key_id": r(40, HEX), "private_key": key}
    out.append(Positive("gcp-service-account-key", json.dumps(sa), body.split("\\n")[1]))
    add(
        "azure-storage-key",
        "DefaultEndpointsProtocol=https;AccountName=notes;AccountKey={s};EndpointSuffix=core.windows.net",
        r(86, B64) + "==",
    )
    add("azure-storage-key", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKey={s}", r(43, B64) + "=")
    for prefix in ("ghp_", "gho_", "ghs_"):
        add("github-token", "push with token {s} from the CI box", prefix + r(36))
    add("github-token", "GITHUB_TOKEN: {s}", "github_pat_" + r(22) + "_" + r(59))
    add("gitlab-token", "gitlab: {s}", "glpat-" + r(20, B64URL))
    add(
        "slack-token",
        "bot token is {s}",
        f"xoxb-{rng.randrange(10**11, 10**12)}-{rng.randrange(10**12, 10**13)}-{r(24)}",
    )
    add(
        "slack-webhook",
        "alerts go to https://{s}",
        f"hooks.slack.com/services/T{r(8, BASE32)}/B{r(10, BASE32)}/{r(24)}",
    )
    add("stripe-live-key", "stripe = {s}", "sk_live_" + r(32))
    add("stripe-live-key", "restricted key {s}", "rk_live_" + r(32))
    add("anthropic-api-key", "ANTHROPIC_API_KEY is {s}", "sk-ant-api03-" + r(93, B64URL) + "AA")
    add("openai-api-key", "openai project key {s}", "sk-proj-" + r(120, B64URL))
    add("openai-api-key", "old openai key {s}", "sk-" + r(48))
    add("twilio-api-key", "twilio api key sid {s}", "SK" + r(32, HEX))
    add("sendgrid-api-key", "mail via {s}", "SG." + r(22, B64URL) + "." + r(43, B64URL))
    add(
        "gitmem-token",
        "GITMEM_TOKEN={s}",
        "gitmem_" + r(26, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") + "_" + r(43, B64URL),
    )
    add("npm-token", "//registry.npmjs.org/:_authToken={s}", "npm_" + r(36))
    add("pypi-token", "token for twine: {s}", "pypi-AgEIcHlwaS5vcmc" + r(120, B64URL))
    pem_body = "\n".join(r(64, B64) for _ in range(8))
    out.append(
        Positive(
            "private-key",
            f"deploy key:\n-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n-----END RSA PRIVATE KEY-----\n",
            pem_body.split("\n")[2],
        )
    )
    out.append(
        Positive(
            "private-key",
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{pem_body}\n-----END OPENSSH PRIVATE KEY-----",
            pem_body.split("\n")[0],
        )
    )
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(
        json.dumps({"sub": str(rng.randrange(10**6)), "name": "agent", "iat": 1700000000}).encode()
    )
    add("jwt", "session cookie: {s}", f"{header}.{payload}.{_b64url(rng.randbytes(32))}")
    add("url-password", "DATABASE_URL=postgres://app:{s}@db.internal:5432/app", r(16))
    add("url-password", "clone from https://agent:{s}@git.example.com/team/repo.git", r(12))
    add("password-assignment", 'DB_PASSWORD = "{s}"', r(14))
    add("password-assignment", "  password: '{s}'", r(10, ALNUM + "!#%&"))
    add("password-assignment", '{{"client_secret": "{s}"}}', r(24, ALNUM))
    add("password-assignment", "SMTP_PASS={s}", r(12))
    add("high-entropy-string", "session blob {s} (do not share)", r(48, B64))
    add("high-entropy-string", 'cache="{s}"', r(40, string.ascii_lowercase + string.digits))
    add(
        "email",
        "write to {s} about the invoice",
        f"{r(8, string.ascii_lowercase)}.{r(6, string.ascii_lowercase)}@example.org",
    )
    add(
        "phone-number",
        "call the customer on {s} after 5pm",
        f"+44 20 {rng.randrange(7000, 7999)} {rng.randrange(1000, 9999)}",
    )
    add("phone-number", "support line {s}", f"(415) 555-{rng.randrange(1000, 9999)}")
    add("card-number", "paid with {s} yesterday", " ".join(_chunks(_luhn_complete("4", 16, rng), 4)))
    add("card-number", "mc {s}", _luhn_complete("52", 16, rng))
    add(
        "iban",
        "wire to {s} by Friday",
        " ".join(_chunks(_iban("DE", "".join(rng.choice(string.digits) for _ in range(18))), 4)),
    )
    add("iban", "iban {s}", _iban("GB", "WEST" + "".join(rng.choice(string.digits) for _ in range(14))))
    return out


def _chunks(s: str, n: int) -> list[str]:
    return [s[i : i + n] for i in range(0, len(s), n)]
