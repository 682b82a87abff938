"""SASL on SASL_PLAINTEXT and SASL_SSL listeners, as Kafka's SaslServerAuthenticator: before
authentication a connection may send only ApiVersions and SaslHandshake (17); the handshake names a
mechanism; tokens then come in SaslAuthenticate (36) requests (handshake v1, KIP-152) or as raw
size-prefixed frames (handshake v0). A failure is answered (SASL_AUTHENTICATION_FAILED with Kafka's
message, or UNSUPPORTED_SASL_MECHANISM listing the enabled mechanisms) and the connection closed;
anything else before authentication closes it at once. Sessions last connections.max.reauth.ms (or
until an OAUTHBEARER token expires); a client re-authenticates with a new handshake (KIP-368), and a
request that arrives after the session expired closes the connection.

Also the listener's security set-up (`ListenerSecurity`), built once at start-up."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from sharebroker.broker.security.jaas import single_module
from sharebroker.broker.security.oauthbearer import (
    JwksValidator,
    OAuthBearerAuthzError,
    OAuthBearerServer,
    UnsecuredValidator,
)
from sharebroker.broker.security.principal import ANONYMOUS, KafkaPrincipal
from sharebroker.broker.security.scram import ScramAuthzError, ScramCredentials, ScramServer
from sharebroker.broker.security.tls import PrincipalMapper, peer_distinguished_name, server_context
from sharebroker.broker.structured_log import get_logger
from sharebroker.config.definitions import ConfigError
from sharebroker.config.listeners import Listener
from sharebroker.config.security_settings import (
    JWKS_VALIDATOR,
    SASL_MECHANISMS,
    listener_setting,
    mechanism_jaas_config,
    mechanism_setting,
)
from sharebroker.protocol.api_table import API_VERSIONS
from sharebroker.protocol.codec import FrameError, build, decode_request, encode_response, peek_header, response_class

if TYPE_CHECKING:
    from sharebroker.config import BrokerConfig

log = get_logger("sharebroker.security")

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


class Mechanism(Protocol):
    mechanism: str
    user: str | None
    complete: bool

    def evaluate(self, token: bytes) -> bytes: ...


class AuthFailed(Exception):
    """A failed exchange: `message` is what the client is told."""


class PlainServer:
    """RFC 4616 PLAIN against the user_<name>="password" entries of PlainLoginModule."""

    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.user: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        parts = text.split("\x00", 3)
        if len(parts) != 3:
            raise AuthFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(parts), 4)}")
        authzid, username, password = parts
        if not username:
            raise AuthFailed("Authentication failed: username not specified")
        if not password:
            raise AuthFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        if expected is None or not _equal(expected, password):
            raise AuthFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise AuthFailed("Authentication failed: Client requested an authorization id that is different "
                             "from username")
        self.user = username
        self.complete = True
        return b""


def _equal(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode(), b.encode())


@dataclass
class ListenerSecurity:
    """What a listener needs to authenticate its connections."""

    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: PrincipalMapper | None = None
    mechanisms: list[str] = field(default_factory=list)
    plain_users: dict[str, str] = field(default_factory=dict)
    oauth: UnsecuredValidator | JwksValidator | None = None
    reauth_ms: int = 0
    max_receive: int = 524288
    scram: ScramCredentials | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def new_mechanism(self, name: str) -> Mechanism:
        if name == "PLAIN":
            return PlainServer(self.plain_users)
        if name.startswith("SCRAM-"):
            assert self.scram is not None
            return ScramServer(name, self.scram)
        assert self.oauth is not None
        return OAuthBearerServer(self.oauth)

    def ssl_principal(self, ssl_object: Any) -> KafkaPrincipal:
        """The principal of an SSL connection: the mapped certificate DN, ANONYMOUS without one."""
        dn = peer_distinguished_name(ssl_object)
        if dn is None or self.principal_mapper is None:
            return ANONYMOUS
        return KafkaPrincipal("User", self.principal_mapper.name(dn))


def listener_security(config: BrokerConfig, listener: Listener, scram: ScramCredentials) -> ListenerSecurity:
    """Build a listener's security from the configuration; ConfigError for what cannot be served."""
    def get(name: str) -> Any:
        return listener_setting(config.value, config.listener_settings, listener.name, name)

    sec = ListenerSecurity(listener.name, listener.security_protocol, scram=scram)
    if listener.security_protocol in ("SSL", "SASL_SSL"):
        sec.ssl_context = server_context(get)
        sec.principal_mapper = PrincipalMapper(get("ssl.principal.mapping.rules"))
    if not sec.sasl:
        return sec
    sec.reauth_ms = get("connections.max.reauth.ms")
    sec.max_receive = get("sasl.server.max.receive.size")
    mechanisms = list(get("sasl.enabled.mechanisms"))
    if not mechanisms:
        raise ConfigError("sasl.enabled.mechanisms", f"No SASL mechanism enabled for listener {listener.name}")
    for name in mechanisms:
        if name == "GSSAPI":
            raise ConfigError("sasl.enabled.mechanisms", f"GSSAPI (Kerberos) is not supported by sharebroker "
                              f"(listener {listener.name}); enable PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER "
                              "with sasl.enabled.mechanisms")
        if name not in SASL_MECHANISMS:
            raise ConfigError("sasl.enabled.mechanisms", f"Unsupported SASL mechanism {name} for listener "
                              f"{listener.name}; supported: {', '.join(SASL_MECHANISMS)}")
    sec.mechanisms = mechanisms
    for name in mechanisms:
        jaas = mechanism_jaas_config(config.value, config.listener_settings, listener.name, name)
        setting = f"listener.name.{listener.name.lower()}.{name.lower()}.sasl.jaas.config"
        if name == "PLAIN":
            if jaas is None:
                raise ConfigError(setting, f"PLAIN on listener {listener.name} needs users: {setting}="
                                  f'{_PLAIN_MODULE} required user_alice="alice-secret";')
            module = single_module(jaas, setting)
            sec.plain_users = {k[len("user_"):]: v for k, v in module.options.items() if k.startswith("user_")}
        elif name == "OAUTHBEARER":
            def mech(key: str) -> Any:
                return mechanism_setting(config.value, config.listener_settings, listener.name, "OAUTHBEARER", key)

            if mech("sasl.server.callback.handler.class") == JWKS_VALIDATOR:
                sec.oauth = _jwks_validator(listener.name, mech)
            else:
                sec.oauth = UnsecuredValidator(single_module(jaas, setting).options if jaas else {})
    return sec


def _jwks_validator(listener: str, mech: Callable[[str], Any]) -> JwksValidator:
    url = mech("sasl.oauthbearer.jwks.endpoint.url")
    if not url:
        raise ConfigError("sasl.oauthbearer.jwks.endpoint.url", f"OAUTHBEARER on listener {listener} with "
                          f"{JWKS_VALIDATOR} needs sasl.oauthbearer.jwks.endpoint.url")
    try:
        import jwt  # noqa: F401  (PyJWT)
    except ImportError:
        raise ConfigError("sasl.oauthbearer.jwks.endpoint.url", "JWKS validation needs PyJWT: pip install pyjwt") from None
    validator = JwksValidator(url, audience=list(mech("sasl.oauthbearer.expected.audience")),
                              issuer=mech("sasl.oauthbearer.expected.issuer") or None,
                              principal_claim=mech("sasl.oauthbearer.sub.claim.name"),
                              scope_claim=mech("sasl.oauthbearer.scope.claim.name"),
                              skew_s=mech("sasl.oauthbearer.clock.skew.seconds"))
    validator.refresh_ms = mech("sasl.oauthbearer.jwks.endpoint.refresh.ms")
    try:
        validator.refresh()  # at start-up, as Kafka: a broker that cannot read its keys does not start
    except Exception as exc:
        raise ConfigError("sasl.oauthbearer.jwks.endpoint.url", f"Cannot read the JWKS at {url}: {exc}") from None
    return validator


# -- the per-connection exchange -------------------------------------------------------------------


@dataclass
class Outcome:
    """What the connection does with a frame the authenticator handled."""

    response: bytes | None  # None: nothing to send
    close: bool = False
    # Not for the authenticator: the connection processes the frame as any request.
    passthrough: bool = False
    reason: str = "authentication failed"


PASS = Outcome(None, passthrough=True)
# The session lifetime sent is a timedelta in kio, which holds at most about 2.7 million years;
# a token that expires later (exp 1e308) gets a century, which to a client is the same: never.
_MAX_LIFETIME_MS = 100 * 365 * 86_400_000
_AUTH_APIS = (17, 18)


class SaslSession:
    """The SASL state of one connection."""

    def __init__(self, security: ListenerSecurity, conn_id: int, peer: str,
                 on_principal: Callable[[KafkaPrincipal], None]) -> None:
        self._sec = security
        self._conn_id = conn_id
        self._peer = peer
        self._on_principal = on_principal
        self.state = "initial"  # initial, handshake, authenticate, complete
        self.raw_tokens = False  # handshake v0: tokens without Kafka headers
        self.mechanism: str | None = None
        self._server: Mechanism | None = None
        self.principal: KafkaPrincipal | None = None
        self.expires_at: float | None = None  # monotonic
        self.reauthenticating = False
        self._last_reauth = float("-inf")  # monotonic start of the last re-authentication
        self._bad_reauth_mechanism: str | None = None  # Kafka's REAUTH_BAD_MECHANISM message

    @property
    def authenticated(self) -> bool:
        return self.state == "complete"

    def _fail(self, event: str, **fields: Any) -> None:
        log.warning(event, conn=self._conn_id, peer=self._peer, listener=self._sec.listener, **fields)

    def check(self, frame: bytes | memoryview) -> Outcome:
        """For an authenticated connection: PASS, or a re-authentication to start, or a close when
        the session expired."""
        if self.expires_at is not None and time.monotonic() >= self.expires_at:
            self._fail("authentication session expired, closing connection", principal=str(self.principal),
                       mechanism=self.mechanism,
                       detail="the client did not re-authenticate within connections.max.reauth.ms "
                              "or the token lifetime")
            return Outcome(None, close=True, reason="authentication session expired")
        if len(frame) >= 2 and frame[0] == 0 and frame[1] == 17:
            # As Kafka's KafkaChannel: re-authentication only for a session that expires, at most once
            # a second; other handshakes go to the SaslHandshake handler (ILLEGAL_SASL_STATE).
            now = time.monotonic()
            if self.expires_at is None or now - self._last_reauth < 1.0:
                return PASS
            self._last_reauth = now
            self.reauthenticating = True
            self.state = "handshake"
            return self._kafka_request(frame)
        return PASS

    def handle(self, frame: bytes | memoryview) -> Outcome:
        """A frame before authentication completed."""
        if self.state == "authenticate":
            if self.raw_tokens:
                return self._token(bytes(frame), None)
            return self._authenticate_request(frame)
        return self._kafka_request(frame)

    def _kafka_request(self, frame: bytes | memoryview) -> Outcome:
        try:
            api_key, version, _ = peek_header(frame)
        except FrameError:
            api_key = version = -1
        if api_key not in _AUTH_APIS:
            self._fail("request before authentication, closing connection", api_key=api_key,
                       state=self.state, detail="Invalid request, potential reasons: kafka client configured "
                       "with the wrong security protocol, it does not support KIP-43 or it is not a kafka client.")
            return Outcome(None, close=True, reason="request before authentication")
        if api_key == 18:
            if self.state != "initial":
                self._fail("unexpected ApiVersions request during SASL authentication, closing connection",
                           state=self.state)
                return Outcome(None, close=True)
            lo, hi = API_VERSIONS[18]
            if lo <= version <= hi:  # a version it must retry lower leaves the door open, as Kafka
                self.state = "handshake"
            return PASS  # answered by the ApiVersions handler, as on any listener
        try:
            req = decode_request(frame)
        except FrameError as exc:
            self._fail("malformed SaslHandshake request, closing connection", error=exc.reason)
            return Outcome(None, close=True)
        mechanism = req.body.mechanism
        enabled = self._sec.mechanisms
        if mechanism not in enabled:
            self._fail("unsupported SASL mechanism, closing connection", mechanism=mechanism,
                       enabled=",".join(enabled), error="UNSUPPORTED_SASL_MECHANISM")
            return Outcome(self._handshake_response(req, ErrorCode.unsupported_sasl_mechanism), close=True)
        if self.reauthenticating and mechanism != self.mechanism:
            # Kafka answers the handshake, then fails the first token (REAUTH_BAD_MECHANISM).
            self._bad_reauth_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                          f"re-authentication of mechanism '{self.mechanism}'")
        else:
            self._bad_reauth_mechanism = None
        self.mechanism = mechanism
        self.raw_tokens = req.api_version == 0
        self._server = self._sec.new_mechanism(mechanism)
        self.state = "authenticate"
        return Outcome(self._handshake_response(req, ErrorCode.none))

    def _handshake_response(self, req: Any, code: ErrorCode) -> bytes:
        return encode_response(req.correlation_id, build(response_class(17, req.api_version), {
            "error_code": code, "mechanisms": list(self._sec.mechanisms)}))

    def _authenticate_request(self, frame: bytes | memoryview) -> Outcome:
        try:
            req = decode_request(frame)
        except FrameError as exc:
            self._fail("malformed request during SASL authentication, closing connection", error=exc.reason,
                       api_key=exc.api_key)
            return Outcome(None, close=True)
        if req.api_key != 36:
            from sharebroker.broker.apis import error_response

            message = f"Unexpected Kafka request of type {_api_name(req.api_key)} during SASL authentication."
            self._fail("request during SASL authentication, closing connection", api_key=req.api_key,
                       error="ILLEGAL_SASL_STATE")
            try:
                resp = error_response(req, ErrorCode.illegal_sasl_state, message)
            except Exception:
                resp = None
            return Outcome(encode_response(req.correlation_id, resp) if resp is not None else None, close=True)
        return self._token(req.body.auth_bytes, req)

    def _token(self, token: bytes, req: Any) -> Outcome:
        server = self._server
        assert server is not None and self.mechanism is not None
        what = "re-authentication" if self.reauthenticating else "authentication"
        detail: str | None = None
        try:
            if self._bad_reauth_mechanism is not None:
                raise AuthFailed(self._bad_reauth_mechanism)
            challenge = server.evaluate(token)
        except (AuthFailed, ScramAuthzError, OAuthBearerAuthzError) as exc:
            message = str(exc)
            detail = getattr(server, "validation_error", None)  # why an OAUTHBEARER token was refused
        except Exception as exc:  # ScramError, OAuthBearerError, and anything a malformed token may cause
            # Kafka keeps a SaslException's own text from the client (it may tell which users exist).
            detail = str(exc) or type(exc).__name__
            message = (f"Authentication failed during {what} due to invalid credentials with SASL mechanism "
                       f"{self.mechanism}")
        else:
            return self._progress(challenge, req, what)
        self._fail(f"SASL {what} failed, closing connection", mechanism=self.mechanism,
                   error="SASL_AUTHENTICATION_FAILED", message=message, **({"detail": detail} if detail else {}))
        if req is None:  # raw tokens: Kafka closes without a word
            return Outcome(None, close=True)
        return Outcome(self._authenticate_response(req, ErrorCode.sasl_authentication_failed, message, b"", 0),
                       close=True)

    def _progress(self, challenge: bytes, req: Any, what: str) -> Outcome:
        server = self._server
        assert server is not None
        lifetime_ms = 0
        if server.complete:
            assert server.user is not None
            principal = KafkaPrincipal("User", server.user)
            if self.reauthenticating and principal != self.principal:
                old = self.principal
                assert old is not None
                message = (f"Cannot change principals during re-authentication from {old.principal_type}.{old.name}: "
                           f"{principal.principal_type}.{principal.name}")
                self._fail(f"SASL {what} failed, closing connection", mechanism=self.mechanism,
                           error="SASL_AUTHENTICATION_FAILED", message=message)
                if req is None:
                    return Outcome(None, close=True)
                return Outcome(self._authenticate_response(req, ErrorCode.sasl_authentication_failed, message,
                                                           b"", 0), close=True)
            lifetime_ms = self._session_lifetime_ms(server)
            self.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms or self._expiring(server) else None
            self.principal = principal
            self.state = "complete"
            self._on_principal(principal)
            log.info(f"SASL {what} succeeded", conn=self._conn_id, peer=self._peer, listener=self._sec.listener,
                     mechanism=self.mechanism, principal=str(principal), session_lifetime_ms=lifetime_ms)
            self.reauthenticating = False
            self._server = None
        if req is None:
            return Outcome(len(challenge).to_bytes(4, "big") + challenge)
        return Outcome(self._authenticate_response(req, ErrorCode.none, None, challenge, lifetime_ms))

    def _expiring(self, server: Mechanism) -> bool:
        return self._sec.reauth_ms > 0 or getattr(server, "expires_ms", None) is not None

    def _session_lifetime_ms(self, server: Mechanism) -> int:
        """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs, at most _MAX_LIFETIME_MS."""
        credential_expiry: int | None = getattr(server, "expires_ms", None)
        max_reauth = self._sec.reauth_ms
        now_ms = int(time.time() * 1000)
        if credential_expiry is None:
            lifetime = max(0, max_reauth) if max_reauth > 0 else 0
        elif max_reauth <= 0:
            lifetime = max(0, credential_expiry - now_ms)
        else:
            lifetime = max(0, min(credential_expiry - now_ms, max_reauth))
        return min(lifetime, _MAX_LIFETIME_MS)

    def _authenticate_response(self, req: Any, code: ErrorCode, message: str | None, token: bytes,
                               lifetime_ms: int) -> bytes:
        return encode_response(req.correlation_id, build(response_class(36, req.api_version), {
            "error_code": code, "error_message": message, "auth_bytes": token, "session_lifetime": lifetime_ms}))


def _api_name(key: int) -> str:
    """Kafka's ApiKeys constant name: API_VERSIONS."""
    from kio.schema.index import api_key_map

    return str(api_key_map.get(key, f"api-{key}")).upper()


__all__ = ["ListenerSecurity", "Outcome", "PASS", "PlainServer", "SaslSession", "listener_security"]
