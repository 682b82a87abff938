"""The tools' side of TLS and SASL, configured as Kafka's tools are: a `--command-config` properties
file with `security.protocol`, `ssl.truststore.*` / `ssl.keystore.*` (PEM or PKCS12, as the broker
reads them) and `sasl.mechanism` + `sasl.jaas.config` (PlainLoginModule or ScramLoginModule with
username/password; OAuthBearerLoginModule with `unsecuredLoginStringClaim_sub`, Kafka's unsecured
login). A connection is wrapped in TLS, then after ApiVersions authenticates with SaslHandshake v1
and SaslAuthenticate (KIP-152)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sharebroker.cli.wire import ToolError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_MECHANISMS = ("PLAIN", *_SCRAM_HASHES, "OAUTHBEARER")


@dataclass
class ClientSecurity:
    """How the tools connect: TLS (`ssl_context`, `check_hostname`) and SASL (`mechanism`, `username`,
    `password`; `token` for OAUTHBEARER)."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""
    token: str = ""

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """From client properties; ToolError naming the property at fault."""
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise ToolError(f"Invalid value {protocol} for configuration security.protocol: "
                            f"String must be one of: {', '.join(PROTOCOLS)}")
        sec = cls(protocol)
        if protocol.endswith("SSL"):
            sec.ssl_context = _ssl_context(props)
        if protocol.startswith("SASL_"):
            sec._sasl_from(props)
        return sec

    def _sasl_from(self, props: Mapping[str, str]) -> None:
        from sharebroker.broker.security.jaas import single_module
        from sharebroker.config.definitions import ConfigError

        mechanism = props.get("sasl.mechanism", "GSSAPI").strip()
        if mechanism not in _MECHANISMS:
            raise ToolError(f"sasl.mechanism={mechanism} is not supported by these tools; use one of "
                            f"{', '.join(_MECHANISMS)}")
        jaas = props.get("sasl.jaas.config")
        if not jaas:
            raise ToolError(f"sasl.mechanism={mechanism} needs sasl.jaas.config, e.g. "
                            'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                            'password="alice-secret";')
        try:
            options = single_module(jaas, "sasl.jaas.config").options
        except ConfigError as exc:
            raise ToolError(f"Invalid value for configuration sasl.jaas.config: {exc.message}") from None
        self.mechanism = mechanism
        if mechanism == "OAUTHBEARER":
            from sharebroker.broker.security.oauthbearer import unsecured_token

            sub = options.get("unsecuredLoginStringClaim_sub")
            if not sub:
                raise ToolError("OAUTHBEARER in these tools takes Kafka's unsecured login: sasl.jaas.config="
                                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                                'unsecuredLoginStringClaim_sub="alice";')
            self.token = unsecured_token(sub)
            return
        self.username, self.password = options.get("username", ""), options.get("password", "")
        if not self.username:
            raise ToolError(f"sasl.jaas.config for {mechanism} needs username and password options")

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """TLS over a connected socket (the handshake happens here); ToolError when it fails."""
        if self.ssl_context is None:
            return sock
        try:
            return self.ssl_context.wrap_socket(sock, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise ToolError(f"SSL handshake with {host} failed: {exc.verify_message or exc}") from None
        except ssl.SSLError as exc:
            sock.close()
            raise ToolError(f"SSL handshake with {host} failed: {exc.reason or exc}") from None

    def authenticate(self, request: Callable[[int, dict[str, Any]], Any]) -> None:
        """The SASL exchange over a connection's `request(api_key, body)`."""
        if self.mechanism is None:
            return
        resp = request(17, {"mechanism": self.mechanism})
        if int(resp.error_code):
            raise _auth_error(resp.error_code, f"The broker does not take SASL mechanism {self.mechanism}; it "
                              f"takes {', '.join(resp.mechanisms)}")
        if self.mechanism == "PLAIN":
            _step(request, f"\x00{self.username}\x00{self.password}".encode())
        elif self.mechanism == "OAUTHBEARER":
            _step(request, f"n,,\x01auth=Bearer {self.token}\x01\x01".encode())
        else:
            _scram(request, _SCRAM_HASHES[self.mechanism], self.username, self.password)


def _auth_error(code: Any, message: str | None) -> ToolError:
    from sharebroker.cli.wire import KafkaApiError

    return KafkaApiError(code, message, "Authentication failed: ")


def _step(request: Callable[[int, dict[str, Any]], Any], token: bytes) -> bytes:
    resp = request(36, {"auth_bytes": token})
    if int(resp.error_code):
        raise _auth_error(resp.error_code, resp.error_message)
    return bytes(resp.auth_bytes)


def _scram(request: Callable[[int, dict[str, Any]], Any], hash_name: str, username: str, password: str) -> None:
    """RFC 5802 client side, as Kafka's ScramSaslClient (no channel binding)."""
    def h(key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, hash_name).digest()

    nonce = base64.b64encode(os.urandom(24)).decode()
    name = username.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={name},r={nonce}"
    server_first = _step(request, f"n,,{first_bare}".encode()).decode()
    attrs = dict(item.split("=", 1) for item in server_first.split(",") if "=" in item)
    if not attrs.get("r", "").startswith(nonce) or "s" not in attrs or "i" not in attrs:
        raise ToolError(f"Invalid SCRAM server first message: {server_first}")
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = h(salted, b"Client Key")
    final_bare = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{final_bare}".encode()
    signature = h(hashlib.new(hash_name, client_key).digest(), auth_message)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_final = _step(request, f"{final_bare},p={proof}".encode()).decode()
    expected = base64.b64encode(h(h(salted, b"Server Key"), auth_message)).decode()
    if server_final != f"v={expected}":
        raise ToolError(f"Invalid SCRAM server signature: {server_final}")


def _ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """The client context: the trust store (else the system's CAs, as Java's default trust store),
    a key store for mTLS, and host name checks unless ssl.endpoint.identification.algorithm is
    empty. Store types as Kafka's (JKS by default, which cannot be read here: set PEM or PKCS12)."""
    from sharebroker.broker.security.tls import load_key_material, load_trust
    from sharebroker.config.definitions import ConfigError

    def get(name: str) -> Any:
        return props.get(name) or None

    try:
        if get("ssl.truststore.location") or get("ssl.truststore.certificates"):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            load_trust(ctx, get)
        else:
            ctx = ssl.create_default_context()
        if get("ssl.keystore.location") or get("ssl.keystore.certificate.chain"):
            load_key_material(ctx, get)
    except ConfigError as exc:
        raise ToolError(exc.message) from None
    ctx.check_hostname = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


__all__ = ["PROTOCOLS", "ClientSecurity"]
