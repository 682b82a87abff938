"""OAUTHBEARER (RFC 7628) with Kafka's unsecured JWS validator
(OAuthBearerUnsecuredValidatorCallbackHandler): an unsigned JWT (`alg` "none", empty signature)
whose principal claim (`sub`, or unsecuredValidatorPrincipalClaimName) is a string, `exp` in the
future, `iat` (if present) not in the future, and the required scope (unsecuredValidatorRequiredScope)
granted. For development only, as in Kafka: anyone can mint such a token."""

from __future__ import annotations

import base64
import json
import math
import re
import time
from typing import Any

from sharebroker.config.definitions import ConfigError

_SEPARATOR = "\x01"
_INITIAL = re.compile(r"n,(?:a=([^,]*))?," + _SEPARATOR + r"(.*)" + _SEPARATOR, re.DOTALL)
_AUTH = re.compile(r"([\w]+) +([-_~+/.a-zA-Z0-9]+=*)")


class OAuthBearerError(Exception):
    """A malformed client message: Kafka's generic failure message."""


class OAuthBearerAuthzError(OAuthBearerError):
    """A failure whose own message Kafka sends to the client."""


class TokenInvalid(Exception):
    def __init__(self, message: str, scope: str | None = None) -> None:
        super().__init__(message)
        self.scope = scope


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class UnsecuredValidator:
    def __init__(self, options: dict[str, str]) -> None:
        self.principal_claim = (options.get("unsecuredValidatorPrincipalClaimName") or "").strip() or "sub"
        self.scope_claim = (options.get("unsecuredValidatorScopeClaimName") or "").strip() or "scope"
        self.required_scope = (options.get("unsecuredValidatorRequiredScope") or "").split()
        skew = (options.get("unsecuredValidatorAllowableClockSkewMs") or "").strip()
        try:
            self.skew_ms = int(skew) if skew else 0
        except ValueError:
            raise ConfigError("sasl.jaas.config", f"unsecuredValidatorAllowableClockSkewMs: {skew}") from None
        if self.skew_ms < 0:
            raise ConfigError("sasl.jaas.config", f"Allowable clock skew millis must not be negative: {skew}")

    def validate(self, token: str) -> tuple[str, int]:
        """(principal name, expiry in epoch ms) of a valid token; TokenInvalid otherwise."""
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenInvalid(f"Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded "
                               f"values: {len(parts)}")
        if parts[2]:
            raise TokenInvalid("Unsecured JWS must have an empty signature")
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
        except ValueError as exc:
            raise TokenInvalid(f"Invalid unsecured JWS: {exc}") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise TokenInvalid("Invalid unsecured JWS: header and claims must be JSON objects")
        if header.get("alg", "none") != "none":
            raise TokenInvalid("Unsecured JWS must have alg none")
        principal = claims.get(self.principal_claim)
        if principal is None:
            raise TokenInvalid(f"Required claim missing: {self.principal_claim}")
        if not isinstance(principal, str) or not principal.strip():
            raise TokenInvalid(f"The {self.principal_claim} claim had the incorrect type: "
                               f"{type(principal).__name__}")
        now_ms = time.time() * 1000
        iat = claims.get("iat")
        if iat is not None:
            if not _number(iat):
                raise TokenInvalid("The iat claim had the incorrect type")
            if iat * 1000 > now_ms + self.skew_ms:
                raise TokenInvalid(f"The Issued At value ({iat} seconds) was after the indicated time "
                                   f"({now_ms / 1000} seconds) plus allowable clock skew ({self.skew_ms} millis)")
        exp = claims.get("exp")
        if exp is None:
            raise TokenInvalid("Required claim missing: exp")
        if not _number(exp):
            raise TokenInvalid("The exp claim had the incorrect type")
        if now_ms - self.skew_ms >= exp * 1000:
            raise TokenInvalid(f"The indicated time ({now_ms / 1000} seconds) minus allowable clock skew "
                               f"({self.skew_ms} millis) was on or after the Expiration Time value ({exp} seconds)")
        if iat is not None and exp <= iat:
            raise TokenInvalid(f"The Expiration Time time ({exp} seconds) was not after the Issued At time "
                               f"({iat} seconds)")
        if self.required_scope:
            raw = claims.get(self.scope_claim)
            granted = raw.split() if isinstance(raw, str) else [s for s in raw or () if isinstance(s, str)]
            missing = [s for s in self.required_scope if s not in granted]
            if missing:
                raise TokenInvalid(f"The provided scope ({granted}) was missing a required scope ({missing})",
                                   scope=" ".join(self.required_scope))
        return principal, int(min(exp * 1000, 2**63 - 1))  # a far-off exp (1e308) is a long's maximum


def _number(value: Any) -> bool:
    """A JSON number a time can be: not a boolean, not infinite or NaN."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


class JwksValidator:
    """Kafka's OAuthBearerValidatorCallbackHandler (BrokerJwtValidator): a JWT signed by a key of the
    JWKS at sasl.oauthbearer.jwks.endpoint.url (verified with PyJWT), with `exp`, the principal claim
    (sasl.oauthbearer.sub.claim.name), and the expected audience and issuer when configured. The key
    set is fetched at start-up and refreshed every sasl.oauthbearer.jwks.endpoint.refresh.ms off the
    event loop (`refresh`); a token whose key id is unknown starts a refresh and is refused."""

    ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"]

    def __init__(self, url: str, *, audience: list[str], issuer: str | None, principal_claim: str,
                 scope_claim: str, skew_s: int, timeout_s: float = 10.0) -> None:
        self.url = url
        self.audience = audience
        self.issuer = issuer
        self.principal_claim = principal_claim
        self.scope_claim = scope_claim
        self.skew_s = skew_s
        self.timeout_s = timeout_s
        self.keys: dict[str | None, Any] = {}
        self.refresh_wanted = False
        self.refreshed_at = 0.0  # monotonic
        self.refresh_ms = 3_600_000

    def refresh(self) -> None:
        """Fetch the key set (blocking: run it in a thread once serving)."""
        import urllib.request

        import jwt

        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:  # noqa: S310 (a configured URL)
            jwks = jwt.PyJWKSet.from_json(resp.read().decode())
        self.keys = {key.key_id: key for key in jwks.keys}
        self.refresh_wanted = False
        self.refreshed_at = time.monotonic()

    def validate(self, token: str) -> tuple[str, int]:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenInvalid(f"Malformed JWT provided: {exc}") from None
        kid = header.get("kid")
        key = self.keys.get(kid)
        if key is None and kid is None and len(self.keys) == 1:  # one key and a token naming none: that one
            key = next(iter(self.keys.values()))
        if key is None:
            self.refresh_wanted = True
            raise TokenInvalid(f"No key in the JWKS matches the token's key id {header.get('kid')!r}")
        try:
            claims = jwt.decode(token, key.key, algorithms=self.ALGORITHMS, audience=self.audience or None,
                                issuer=self.issuer, leeway=self.skew_s,
                                options={"require": ["exp"], "verify_aud": bool(self.audience)})
        except jwt.PyJWTError as exc:
            raise TokenInvalid(f"Could not validate the JWT: {exc}") from None
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenInvalid(f"The principal claim {self.principal_claim} is missing or not a string")
        exp = claims["exp"]
        return principal, int(min(exp * 1000, 2**63 - 1))


class OAuthBearerServer:
    """The server side: a valid token completes at once; an invalid one is answered with the RFC 7628
    JSON error challenge, and the client's %x01 reply then fails the exchange with that JSON."""

    mechanism = "OAUTHBEARER"

    def __init__(self, validator: UnsecuredValidator | JwksValidator) -> None:
        self._validator = validator
        self.user: str | None = None
        self.expires_ms: int | None = None
        self.complete = False
        self._error: str | None = None
        self.validation_error: str | None = None  # why the last token was refused, for the log

    def evaluate(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise OAuthBearerAuthzError(self._error)
        self._error = None
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise OAuthBearerError("Invalid OAUTHBEARER client first message") from None
        m = _INITIAL.fullmatch(text)
        if m is None:
            raise OAuthBearerError("Invalid OAUTHBEARER client first message")
        pairs = dict(kv.partition("=")[::2] for kv in m.group(2).split(_SEPARATOR) if kv)
        auth = pairs.get("auth")
        if auth is None:
            raise OAuthBearerError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        am = _AUTH.fullmatch(auth)
        if am is None:
            raise OAuthBearerError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if am.group(1).lower() != "bearer":
            raise OAuthBearerError(f"Invalid scheme in OAUTHBEARER client first message: {am.group(1)}")
        try:
            principal, expires_ms = self._validator.validate(am.group(2))
        except TokenInvalid as exc:
            status = "insufficient_scope" if exc.scope is not None else "invalid_token"
            self._error = f'{{"status":"{status}"' + (f', "scope":"{exc.scope}"' if exc.scope else "") + "}"
            self.validation_error = str(exc)
            return self._error.encode()
        authzid = m.group(1) or ""
        if authzid and authzid != principal:
            raise OAuthBearerAuthzError(f"Authentication failed: Client requested an authorization id ({authzid}) "
                                        f"that is different from the token's principal name ({principal})")
        self.user = principal
        self.expires_ms = expires_ms
        self.complete = True
        return b""


def unsecured_token(principal: str, lifetime_s: float = 3600, scope: str | None = None, **claims: Any) -> str:
    """An unsigned JWT as Kafka's unsecured login module makes (for tests and examples)."""
    now = time.time()
    body: dict[str, Any] = {"sub": principal, "iat": int(now), "exp": now + lifetime_s, **claims}
    if scope is not None:
        body["scope"] = scope

    def enc(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{enc({'alg': 'none'})}.{enc(body)}."


__all__ = ["JwksValidator", "OAuthBearerAuthzError", "OAuthBearerError", "OAuthBearerServer", "TokenInvalid",
           "UnsecuredValidator", "unsecured_token"]
