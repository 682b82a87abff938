"""Brokers with TLS and SASL listeners for tests: certificates made for the test (`sharebroker
certs`), users for PLAIN and SCRAM, and the settings each client library needs to connect.

    security = BrokerSecurity(listeners=("SASL_SSL",), users={"alice": "alice-secret"})
    broker = BrokerProcess(tmp_path / "data", security=security).start()
    Producer(security.confluent(broker, "SASL_SSL", "SCRAM-SHA-256", "alice"))

The broker's first listener stays PLAINTEXT (what readiness, admin set-up and the compose CI use);
each listener in `listeners` is named after its protocol.

With `acls` or `super_users` the broker runs Kafka's StandardAuthorizer:

    security = BrokerSecurity(users={"alice": "a-pw", "bob": "b-pw", "admin": "adm-pw"},
                              super_users=["User:admin"],
                              acls=[Acl("User:alice", "READ", "TOPIC", "orders"),
                                    Acl("User:alice", "READ", "GROUP", "workers")])

The users and ACLs are created once, on the first start, by a set-up run of the broker in which
User:ANONYMOUS (the PLAINTEXT listener) is a super user too; the broker the test gets has only the
`super_users` asked for, so PLAINTEXT clients are User:ANONYMOUS with no rights unless an ACL
grants them some. Both are durable, so a restart keeps them."""

from __future__ import annotations

import hashlib
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharebroker.cli.certs import CertPaths, generate

if TYPE_CHECKING:
    from sharebroker.testing.process import BrokerProcess

__all__ = ["Acl", "BrokerSecurity", "token_provider", "unsecured_jwt"]

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_SCRAM = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_SET_UP_PRINCIPAL = "User:ANONYMOUS"


@dataclass(frozen=True)
class Acl:
    """One ACL binding, named as in kafka-acls.sh and Kafka's AclBinding: `principal` (User:alice),
    `operation` (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
    ALTER_CONFIGS, IDEMPOTENT_WRITE, ALL, ...), `resource_type` (TOPIC, GROUP, CLUSTER,
    TRANSACTIONAL_ID, DELEGATION_TOKEN, USER), `name` (kafka-cluster for CLUSTER; `*` for all),
    `pattern_type` (LITERAL, PREFIXED), `permission` (ALLOW, DENY) and `host` (an IP address or *)."""

    principal: str
    operation: str
    resource_type: str = "TOPIC"
    name: str = "*"
    pattern_type: str = "LITERAL"
    permission: str = "ALLOW"
    host: str = "*"

    @classmethod
    def of(cls, binding: Any) -> Acl:
        """An Acl from itself or from confluent-kafka's `AclBinding` (its BROKER is the cluster)."""
        if isinstance(binding, Acl):
            return binding
        rtype = binding.restype.name
        return cls(binding.principal, binding.operation.name, "CLUSTER" if rtype == "BROKER" else rtype,
                   binding.name, binding.resource_pattern_type.name, binding.permission_type.name, binding.host)

    def creation(self) -> dict[str, Any]:
        """The CreateAcls (30) creation entry."""
        from sharebroker.broker.security.acl_store import AclOperation, AclPermissionType, PatternType, ResourceType

        def member(enum: Any, name: str, what: str) -> Any:
            try:
                return enum[name.upper()]
            except KeyError:
                raise ValueError(f"unknown {what} {name!r} in {self}") from None

        return {"resource_type": member(ResourceType, self.resource_type, "resource type"),
                "resource_name": self.name,
                "resource_pattern_type": member(PatternType, self.pattern_type, "pattern type"),
                "principal": self.principal, "host": self.host,
                "operation": member(AclOperation, self.operation, "operation"),
                "permission_type": member(AclPermissionType, self.permission, "permission")}


@dataclass
class BrokerSecurity:
    """The security part of a test broker: `listeners` (SSL, SASL_PLAINTEXT, SASL_SSL) next to
    PLAINTEXT, SASL `mechanisms`, `users` (name -> password, for PLAIN and SCRAM alike),
    `client_auth` for TLS listeners (none, requested, required) and any extra `settings`.
    `acls` (Acl or confluent-kafka AclBinding) and `super_users` (User:admin) turn on Kafka's
    StandardAuthorizer (`authorizer=True` does with neither)."""

    listeners: tuple[str, ...] = ("SASL_SSL",)
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    users: dict[str, str] = field(default_factory=lambda: {"alice": "alice-secret"})
    client_auth: str = "none"
    settings: dict[str, str] = field(default_factory=dict)
    certs: CertPaths | None = None
    acls: Sequence[Any] = ()
    super_users: Sequence[str] = ()
    authorizer: bool = False

    @property
    def authorizing(self) -> bool:
        return bool(self.authorizer or self.acls or self.super_users)

    def prepare(self, directory: Path) -> None:
        """Generate the certificates (once) into `directory`."""
        if self.certs is None and any(p.endswith("SSL") for p in self.listeners):
            self.certs = generate(directory / "certs")

    def overrides(self) -> dict[str, str]:
        out: dict[str, str] = {
            "listener.security.protocol.map": ",".join(["PLAINTEXT:PLAINTEXT", *(f"{p}:{p}" for p in self.listeners)])}
        if self.certs is not None:
            out.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.certs.broker_keystore),
                        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.certs.ca),
                        "ssl.client.auth": self.client_auth})
        if any(p.startswith("SASL_") for p in self.listeners):
            out["sasl.enabled.mechanisms"] = ",".join(self.mechanisms)
            users = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
            for protocol in self.listeners:
                if protocol.startswith("SASL_") and "PLAIN" in self.mechanisms:
                    out[f"listener.name.{protocol.lower()}.plain.sasl.jaas.config"] = f"{_PLAIN_MODULE} required {users};"
        if self.authorizing:
            out["authorizer.class.name"] = _AUTHORIZER
            out["super.users"] = ";".join(self.super_users)
        out.update(self.settings)
        return out

    def set_up_overrides(self) -> dict[str, str]:
        """The settings of the set-up run: User:ANONYMOUS a super user as well."""
        out = self.overrides()
        if self.authorizing:
            out["super.users"] = ";".join([*self.super_users, _SET_UP_PRINCIPAL])
        return out

    def after_start(self, broker: BrokerProcess) -> None:
        """Create the SCRAM users (AlterUserScramCredentials) and the ACLs (CreateAcls) through the
        PLAINTEXT listener."""
        from sharebroker.cli.wire import Client

        scram = [m for m in self.mechanisms if m in _SCRAM]
        if not any(p.startswith("SASL_") for p in self.listeners) or not self.users:
            scram = []
        creations = [Acl.of(b).creation() for b in self.acls]
        if not scram and not creations:
            return
        client = Client(broker.bootstrap, timeout_ms=10000)
        try:
            if creations:
                resp = client.boot().request(30, {"creations": creations})
                refused = [(c, r.error_message) for c, r in zip(self.acls, resp.results) if int(r.error_code)]
                if refused:
                    raise RuntimeError(f"creating ACLs failed: {refused}")
            # One request per mechanism: Kafka refuses to alter one user twice in a request.
            for mechanism in scram:
                mtype, hash_name = _SCRAM[mechanism]
                upsertions = []
                for name, password in self.users.items():
                    salt = os.urandom(16)
                    upsertions.append({"name": name, "mechanism": mtype, "iterations": 4096, "salt": salt,
                                       "salted_password": hashlib.pbkdf2_hmac(hash_name, password.encode(), salt,
                                                                              4096)})
                resp = client.boot().request(51, {"deletions": [], "upsertions": upsertions})
                failed = [r for r in resp.results if int(r.error_code)]
                if failed:
                    raise RuntimeError(f"creating SCRAM users failed: {failed}")
        finally:
            client.close()

    # -- client settings ---------------------------------------------------------------------------

    def _sasl(self, protocol: str, mechanism: str | None) -> str | None:
        if not protocol.startswith("SASL_"):
            return None
        return mechanism or self.mechanisms[0]

    def confluent(self, broker: BrokerProcess, protocol: str = "SASL_SSL", mechanism: str | None = None,
                  user: str | None = None, password: str | None = None, *, client_cert: bool = False) -> dict[str, Any]:
        """confluent-kafka (librdkafka) settings for `protocol` and `mechanism` as `user`."""
        conf: dict[str, Any] = {"bootstrap.servers": broker.listener_bootstrap(protocol), "security.protocol": protocol}
        if protocol.endswith("SSL"):
            assert self.certs is not None
            conf["ssl.ca.location"] = str(self.certs.ca)
            if client_cert:
                conf["ssl.certificate.location"] = str(self.certs.client_chain)
                conf["ssl.key.location"] = str(self.certs.client_key)
        sasl = self._sasl(protocol, mechanism)
        if sasl is not None:
            user = user or next(iter(self.users))
            conf["sasl.mechanism"] = sasl
            if sasl == "OAUTHBEARER":
                conf["enable.sasl.oauthbearer.unsecure.jwt"] = True
                conf["sasl.oauthbearer.config"] = f"principal={user}"
            else:
                conf["sasl.username"] = user
                conf["sasl.password"] = password if password is not None else self.users[user]
        return conf

    def properties(self, broker: BrokerProcess, protocol: str = "SASL_SSL", mechanism: str | None = None,
                   user: str | None = None, password: str | None = None, *,
                   client_cert: bool = False) -> dict[str, str]:
        """Java client properties (kafka-clients; `--command-config` of the `sharebroker` tools)."""
        props = {"bootstrap.servers": broker.listener_bootstrap(protocol), "security.protocol": protocol}
        if protocol.endswith("SSL"):
            assert self.certs is not None
            props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.certs.ca)})
            if client_cert:
                props.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(self.certs.client_p12),
                              "ssl.keystore.password": "changeit"})
        sasl = self._sasl(protocol, mechanism)
        if sasl is not None:
            user = user or next(iter(self.users))
            props["sasl.mechanism"] = sasl
            if sasl == "OAUTHBEARER":
                props["sasl.jaas.config"] = f'{_OAUTH_MODULE} required unsecuredLoginStringClaim_sub="{user}";'
            else:
                secret = password if password is not None else self.users[user]
                module = _PLAIN_MODULE if sasl == "PLAIN" else _SCRAM_MODULE
                props["sasl.jaas.config"] = f'{module} required username="{user}" password="{secret}";'
        return props

    def ssl_context(self, *, client_cert: bool = False) -> ssl.SSLContext:
        assert self.certs is not None
        ctx = ssl.create_default_context(cafile=str(self.certs.ca))
        if client_cert:
            ctx.load_cert_chain(str(self.certs.client_chain), str(self.certs.client_key))
        return ctx

    def kafka_python(self, broker: BrokerProcess, protocol: str = "SASL_SSL", mechanism: str | None = None,
                     user: str | None = None, password: str | None = None, *,
                     client_cert: bool = False) -> dict[str, Any]:
        """kafka-python keyword arguments."""
        return self._python_client(broker, protocol, mechanism, user, password, client_cert, "kafka")

    def aiokafka(self, broker: BrokerProcess, protocol: str = "SASL_SSL", mechanism: str | None = None,
                 user: str | None = None, password: str | None = None, *, client_cert: bool = False) -> dict[str, Any]:
        """aiokafka keyword arguments."""
        return self._python_client(broker, protocol, mechanism, user, password, client_cert, "aiokafka")

    def _python_client(self, broker: BrokerProcess, protocol: str, mechanism: str | None, user: str | None,
                       password: str | None, client_cert: bool, library: str) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap_servers": broker.listener_bootstrap(protocol), "security_protocol": protocol}
        if protocol.endswith("SSL"):
            conf["ssl_context"] = self.ssl_context(client_cert=client_cert)
        sasl = self._sasl(protocol, mechanism)
        if sasl is not None:
            user = user or next(iter(self.users))
            conf["sasl_mechanism"] = sasl
            if sasl == "OAUTHBEARER":
                conf["sasl_oauth_token_provider"] = token_provider(library, user)
            else:
                conf["sasl_plain_username"] = user
                conf["sasl_plain_password"] = password if password is not None else self.users[user]
        return conf


def token_provider(library: str, principal: str, lifetime_s: float = 3600) -> Any:
    """An OAUTHBEARER token provider for kafka-python ("kafka") or aiokafka ("aiokafka") that hands
    out unsecured JWTs for `principal`."""
    if library == "aiokafka":
        from aiokafka.abc import AbstractTokenProvider as AioBase  # type: ignore[import-untyped]

        class AioProvider(AioBase):  # type: ignore[misc]
            async def token(self) -> str:
                return unsecured_jwt(principal, lifetime_s)

        return AioProvider()
    from kafka.net.sasl.oauth import AbstractTokenProvider as KafkaBase  # type: ignore[import-untyped]

    class KafkaProvider(KafkaBase):  # type: ignore[misc]
        def token(self) -> str:
            return unsecured_jwt(principal, lifetime_s)

    return KafkaProvider()


def unsecured_jwt(principal: str, lifetime_s: float = 3600, **claims: Any) -> str:
    """An unsigned JWT that the broker's unsecured OAUTHBEARER validator accepts."""
    from sharebroker.broker.security.oauthbearer import unsecured_token

    return unsecured_token(principal, lifetime_s, **claims)
