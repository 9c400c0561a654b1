"""A C2SP tlog-witness (docs/transparency.md#witnesses): checks that each checkpoint a log submits
is consistent with the last one it cosigned for that origin, and only then cosigns (cosignature/v1).

State lives in one directory: ``witness.key`` (0600, ``PRIVATE+KEY+<name>+<id>+<base64(0x04||seed)>``),
``logs`` (one trusted log vkey a line; the vkey's name is the origin it signs) and ``state.json``
(per origin: the size, root and note last cosigned), replaced atomically and fsynced before a
cosignature leaves, under a lock so that two submissions cannot roll the state back.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gitmem.errors import GitmemError, IntegrityError, InvalidInputError
from gitmem.git.locks import file_lock
from gitmem.git.repoinit import write_atomic
from gitmem.model.tlog import merkle, note
from gitmem.model.tlog.checkpoint import Cosigner, cosigner, parse_body

KEY_FILE = "witness.key"
LOGS_FILE = "logs"
STATE_FILE = "state.json"
MAX_BODY = 64 * 1024
SIZE_TYPE = "text/x.tlog.size"


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, body, content type."""

    status: int
    body: str
    content_type: str = "text/plain; charset=utf-8"


def _new_key(key: Path, text: str) -> None:
    """Write the key whole or not at all: a temporary file, flushed, then linked into place (a
    witness killed between creating the key file and writing it left it empty, and every later
    start failed on it for good)."""
    tmp = key.with_name(f".{key.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with open(fd, "w", encoding="ascii") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, key)  # never over another key
        dfd = os.open(key.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    finally:
        tmp.unlink(missing_ok=True)


class Witness:
    """One witness: its key, the logs it trusts, the newest checkpoint it cosigned per origin."""

    def __init__(self, directory: str | os.PathLike[str], name: str | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        key = self.dir / KEY_FILE
        with file_lock(self.dir / "key.lock"):
            if key.exists() and key.stat().st_size == 0:
                key.unlink()  # made by the O_EXCL create of an older version that was killed
            if not key.exists():
                if not name:
                    raise InvalidInputError(f"{self.dir} holds no witness key: give the witness a name")
                _new_key(key, Cosigner(note.check_name(name), os.urandom(32)).skey() + "\n")
        self.cosigner = cosigner(key.read_text(encoding="ascii"))

    @property
    def vkey(self) -> str:
        """The witness's cosignature/v1 verifier key (type 0x04), for policies."""
        return self.cosigner.verifier().vkey()

    def add_log(self, vkey: str) -> None:
        """Trust the log whose key this is (its key name is its origin)."""
        note.ed25519_verifier(vkey)
        with file_lock(self.dir / "logs.lock"):
            known = self._log_lines()
            if vkey not in known:
                with open(self.dir / LOGS_FILE, "a", encoding="ascii") as fh:
                    fh.write(vkey + "\n")

    def _log_lines(self) -> list[str]:
        try:
            text = (self.dir / LOGS_FILE).read_text(encoding="ascii")
        except FileNotFoundError:
            return []
        return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]

    def _logs(self, origin: str) -> list[note.Ed25519Verifier]:
        return [v for v in (note.ed25519_verifier(k) for k in self._log_lines()) if v.name == origin]

    def state(self) -> dict[str, dict[str, object]]:
        try:
            data = json.loads((self.dir / STATE_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, data: dict[str, dict[str, object]]) -> None:
        write_atomic(self.dir / STATE_FILE, json.dumps(data, sort_keys=True).encode())

    def add_checkpoint(self, body: bytes) -> Reply:
        """The add-checkpoint call: ``old <size>``, proof lines, a blank line, the checkpoint."""
        if len(body) > MAX_BODY:
            return Reply(413, "request too large\n")
        try:
            text = body.decode("utf-8")
            head, sep, signed = text.partition("\n\n")
            lines = head.split("\n")
            if not sep or not lines[0].startswith("old ") or len(lines) - 1 > 63:
                return Reply(400, "expected 'old N', at most 63 proof lines, a blank line, a checkpoint\n")
            size_text = lines[0][4:]
            if not re.fullmatch(r"0|[1-9][0-9]{0,18}", size_text):
                return Reply(400, "bad old size\n")
            old = int(size_text)
            proof = [note.b64decode(line) for line in lines[1:]]
            parsed = note.parse(signed)
        except (UnicodeDecodeError, GitmemError) as exc:
            return Reply(400, f"malformed request: {getattr(exc, 'message', exc)}\n")
        origin = parsed.text.split("\n", 1)[0]
        logs = self._logs(origin)
        if not logs:
            return Reply(404, f"unknown log origin {origin[:80]!r}\n")
        try:
            if not note.verified(parsed, logs):
                return Reply(403, "no signature from a trusted key of this log\n")
        except IntegrityError as exc:
            return Reply(403, f"{exc.message}\n")
        try:
            cp = parse_body(parsed.text)
        except InvalidInputError as exc:
            return Reply(422 if "size 0" in exc.message else 400, f"{exc.message}\n")
        if old > cp.size:
            return Reply(400, "the old size is larger than the checkpoint's\n")
        with self._lock, file_lock(self.dir / "state.lock"):
            data = self.state()
            mine = data.get(origin, {})
            have = int(mine.get("size", 0))  # type: ignore[call-overload]
            if have != old:
                return Reply(409, f"{have}\n", SIZE_TYPE)
            root = note.b64decode(str(mine["root"])) if mine else merkle.EMPTY_ROOT
            if old == 0 and proof:
                return Reply(422, "a proof from size 0 must be empty\n")
            if not merkle.verify_consistency(old, cp.size, root, cp.root, proof):
                return Reply(
                    422, "the consistency proof does not verify: not an extension of what I cosigned\n"
                )
            sig = self.cosigner.cosign(parsed.text, max(int(time.time()), 1))
            data[origin] = {"size": cp.size, "root": note.b64(cp.root), "note": signed, "cosig": sig.line()}
            self._save(data)
        return Reply(200, sig.line())

    def latest(self, origin_hash: str) -> Reply:
        """``GET <prefix>/<sha256(origin) hex>/checkpoint``: the newest cosigned checkpoint."""
        for origin, mine in self.state().items():
            if hashlib.sha256(origin.encode()).hexdigest() == origin_hash:
                return Reply(200, str(mine["note"]) + str(mine.get("cosig", "")))
        return Reply(404, "never cosigned a checkpoint of that log\n")
