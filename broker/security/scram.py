"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the server side of the exchange, and the
credentials it checks, kept durably in the data directory like Kafka's UserScramCredentialRecords
(salt, StoredKey, ServerKey, iterations: never the password)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sharebroker.storage.files import write_atomic

# Kafka's ScramMechanism types (AlterUserScramCredentials/DescribeUserScramCredentials).
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_TYPES.items()}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
CREDENTIALS_FILE = "sharebroker-scram-credentials.json"


class ScramError(Exception):
    """An exchange that fails: Kafka answers every such failure with one generic message."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, Any]:
        b64 = base64.b64encode
        return {"salt": b64(self.salt).decode(), "stored_key": b64(self.stored_key).decode(),
                "server_key": b64(self.server_key).decode(), "iterations": self.iterations}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ScramCredential:
        d = base64.b64decode
        return cls(d(doc["salt"]), d(doc["stored_key"]), d(doc["server_key"]), int(doc["iterations"]))


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def credential_from_salted(mechanism: str, salted_password: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    h = _HASHES[mechanism]
    client_key = _hmac(h, salted_password, b"Client Key")
    return ScramCredential(salt, hashlib.new(h, client_key).digest(), _hmac(h, salted_password, b"Server Key"),
                           iterations)


def credential_from_password(mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


class ScramCredentials:
    """user -> mechanism -> credential, written atomically to the data directory on every change."""

    def __init__(self, log_dir: Path) -> None:
        self.path = log_dir / CREDENTIALS_FILE
        self.users: dict[str, dict[str, ScramCredential]] = {}
        if self.path.exists():
            doc = json.loads(self.path.read_bytes())
            self.users = {user: {m: ScramCredential.from_json(c) for m, c in mechs.items()}
                          for user, mechs in doc.get("users", {}).items()}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def apply(self, upserts: list[tuple[str, str, ScramCredential]], deletes: list[tuple[str, str]]) -> None:
        """Apply a batch of changes durably (all or nothing: the file is written before memory changes)."""
        users = {u: dict(m) for u, m in self.users.items()}
        for user, mechanism in deletes:
            users.get(user, {}).pop(mechanism, None)
            if user in users and not users[user]:
                del users[user]
        for user, mechanism, credential in upserts:
            users.setdefault(user, {})[mechanism] = credential
        doc = {"version": 1, "users": {u: {m: c.to_json() for m, c in sorted(ms.items())} for u, ms in sorted(users.items())}}
        write_atomic(self.path, json.dumps(doc, indent=1).encode())
        self.users = users


_ATTR = re.compile(r"([a-zA-Z])=(.*)", re.DOTALL)


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        m = _ATTR.fullmatch(part)
        if m is None:
            raise ScramError(f"Invalid SCRAM message attribute {part[:32]!r}")
        out.append((m.group(1), m.group(2)))
    return out


def _sasl_name_to_user(name: str) -> str:
    # RFC 5802 saslname: "=2C" is ",", "=3D" is "="; any other "=" is invalid.
    if re.search(r"=(?!2C|3D)", name):
        raise ScramError("Invalid username")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, credentials: ScramCredentials) -> None:
        self.mechanism = mechanism
        self._hash = _HASHES[mechanism]
        self._credentials = credentials
        self._state = "first"
        self.user: str | None = None
        self.complete = False
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if self._state == "first":
            return self._first(text)
        if self._state == "final":
            return self._final(text)
        raise ScramError(f"Unexpected challenge in Sasl server state {self._state}")

    def _first(self, text: str) -> bytes:
        # gs2-header "n,[a=authzid]," (no channel binding) then client-first-message-bare.
        m = re.fullmatch(r"n,(?:a=([^,]*))?,(.*)", text, re.DOTALL)
        if m is None:
            raise ScramError("Invalid SCRAM client first message")
        bare = m.group(2)
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("Invalid SCRAM client first message")
        user = _sasl_name_to_user(attrs[0][1])
        credential = self._credentials.get(user, self.mechanism)
        if credential is None:
            raise ScramError("Authentication failed: Invalid user credentials")
        authzid = m.group(1)
        if authzid and authzid != user:
            raise ScramAuthzError("Authentication failed: Client requested an authorization id that is different "
                                  "from username")
        if credential.iterations < MIN_ITERATIONS:
            raise ScramError(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS}")
        self.user = user
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + secrets.token_urlsafe(24)
        self._server_first = f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        credential = self._credential
        assert credential is not None
        attrs = _attributes(text)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise ScramError("Invalid SCRAM client final message")
        if attrs[1][1] != self._nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        try:
            proof = base64.b64decode(attrs[-1][1], validate=True)
        except ValueError:
            raise ScramError("Invalid client proof") from None
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise ScramError("Invalid client credentials")
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        self._state = "complete"
        self.complete = True
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)


class ScramAuthzError(ScramError):
    """The one SCRAM failure whose own message Kafka sends to the client."""


__all__ = ["CREDENTIALS_FILE", "MAX_ITERATIONS", "MECHANISM_NAMES", "MECHANISM_TYPES", "MIN_ITERATIONS",
           "ScramAuthzError", "ScramCredential", "ScramCredentials", "ScramError", "ScramServer",
           "credential_from_password", "credential_from_salted"]
