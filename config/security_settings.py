"""Security settings (TLS and SASL) with Apache Kafka 4.2's names and defaults, and the
`listener.name.<listener>.` prefix through which each listener may override them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sharebroker.config.definitions import AtLeast, ConfigDef, ConfigError, OneOf

__all__ = ["JWKS_VALIDATOR", "LISTENER_PREFIX", "SASL_MECHANISMS", "SECURITY_DEFS", "is_listener_setting", "listener_setting",
           "mechanism_jaas_config", "mechanism_setting", "security_defs", "split_listener_name",
           "validate_listener_settings"]

LISTENER_PREFIX = "listener.name."
# Mechanisms served; GSSAPI (Kerberos) is known to clients and Kafka but not implemented here.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
_UNSECURED_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
JWKS_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


def _tls_versions(name: str, value: tuple[str, ...]) -> None:
    for item in value:
        if item not in _TLS_PROTOCOLS and item not in ("TLSv1", "TLSv1.1", "SSLv3"):
            raise ConfigError.invalid(name, item, f"Unknown TLS protocol; sharebroker serves {', '.join(_TLS_PROTOCOLS)}")


def _server_callback_handler(name: str, value: str | None) -> None:
    if value not in (None, "", _UNSECURED_VALIDATOR, JWKS_VALIDATOR):
        raise ConfigError.invalid(name, value, "sharebroker validates OAUTHBEARER tokens with Kafka's unsecured "
                                  f"validator ({_UNSECURED_VALIDATOR}, the default) or its JWKS validator "
                                  f"({JWKS_VALIDATOR}); custom callback handlers are not supported")


def security_defs() -> list[ConfigDef]:
    d = ConfigDef
    return [
        # -- TLS (each may be prefixed listener.name.<listener>.) -----------------------------------
        d("ssl.keystore.type", "string", "JKS", "Format of the key store: PEM or PKCS12 (read with the cryptography "
          "library). JKS is not readable here: convert it with keytool -importkeystore -deststoretype PKCS12."),
        d("ssl.keystore.location", "string", None, "Key store file: the broker's private key and certificate chain."),
        d("ssl.keystore.password", "password", None, "Password of the key store file (PKCS12)."),
        d("ssl.key.password", "password", None, "Password of the private key (encrypted PEM key, or PKCS12)."),
        d("ssl.keystore.certificate.chain", "password", None, "The certificate chain in PEM form "
          "(with ssl.keystore.type=PEM)."),
        d("ssl.keystore.key", "password", None, "The private key in PEM (PKCS#8) form (with ssl.keystore.type=PEM)."),
        d("ssl.truststore.type", "string", "JKS", "Format of the trust store: PEM or PKCS12."),
        d("ssl.truststore.location", "string", None, "Trust store file: the CA certificates client certificates "
          "are verified against."),
        d("ssl.truststore.password", "password", None, "Password of the trust store file (PKCS12)."),
        d("ssl.truststore.certificates", "password", None, "Trusted certificates in PEM form "
          "(with ssl.truststore.type=PEM)."),
        d("ssl.client.auth", "string", "none", "Whether clients must present a certificate: required, requested "
          "or none.", OneOf("required", "requested", "none")),
        d("ssl.enabled.protocols", "list", _TLS_PROTOCOLS, "TLS versions accepted (TLSv1.2, TLSv1.3).",
          _tls_versions),
        d("ssl.protocol", "string", "TLSv1.3", "TLS protocol of the SSL context; ssl.enabled.protocols decides "
          "which versions are accepted."),
        d("ssl.cipher.suites", "list", (), "Cipher suites (OpenSSL or IANA names) for TLSv1.2; empty is OpenSSL's "
          "defaults. TLSv1.3 suites are OpenSSL's."),
        d("ssl.principal.mapping.rules", "string", "DEFAULT", "Rules mapping a client certificate's distinguished "
          "name to a principal name: RULE:pattern/replacement/[LU] entries and DEFAULT, as Kafka's SslPrincipalMapper."),
        d("ssl.endpoint.identification.algorithm", "string", "https", "Host name verification of the peer; a "
          "broker with no inter-broker connections never checks one."),
        d("ssl.provider", "string", None, "Security provider. Not used: TLS is OpenSSL's."),
        d("ssl.keymanager.algorithm", "string", "SunX509", "Key manager algorithm. Not used: TLS is OpenSSL's."),
        d("ssl.trustmanager.algorithm", "string", "PKIX", "Trust manager algorithm. Not used: TLS is OpenSSL's."),
        d("ssl.secure.random.implementation", "string", None, "SecureRandom implementation. Not used."),
        # -- SASL --------------------------------------------------------------------------------
        d("sasl.enabled.mechanisms", "list", ("GSSAPI",), "SASL mechanisms served on SASL listeners: PLAIN, "
          "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (GSSAPI, Kafka's default, is not supported)."),
        d("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", "SASL mechanism between brokers. A single "
          "node has no inter-broker connections."),
        d("sasl.jaas.config", "password", None, "JAAS login configuration (PlainLoginModule user_<name>=\"password\" "
          "entries for PLAIN; OAuthBearerLoginModule unsecuredValidator* options for OAUTHBEARER). Usually given "
          "per listener and mechanism: listener.name.<listener>.<mechanism>.sasl.jaas.config."),
        d("sasl.server.callback.handler.class", "class", None, "Server callback handler of OAUTHBEARER, usually "
          "per listener and mechanism (listener.name.<l>.oauthbearer.sasl.server.callback.handler.class): Kafka's "
          f"unsecured validator (the default) or {JWKS_VALIDATOR}, which checks signed JWTs against "
          "sasl.oauthbearer.jwks.endpoint.url.", _server_callback_handler),
        d("sasl.server.max.receive.size", "int", 524288, "Largest frame accepted before authentication completes.",
          AtLeast(1)),
        d("connections.max.reauth.ms", "long", 0, "Most milliseconds an authenticated SASL session lasts before "
          "the client must re-authenticate (KIP-368); a connection that sends a request after its session expired "
          "is closed. 0: sessions never expire."),
        d("sasl.kerberos.service.name", "string", None, "Kerberos service name. GSSAPI is not supported."),
        d("sasl.oauthbearer.jwks.endpoint.url", "string", None, "JWKS endpoint (http/https) whose keys sign "
          "OAUTHBEARER tokens, for the JWKS validator (read with PyJWT)."),
        d("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3600000, "How often the JWKS is fetched again "
          "(also at once when a token names an unknown key).", AtLeast(1)),
        d("sasl.oauthbearer.expected.audience", "list", (), "Audiences one of which a token's aud must hold "
          "(JWKS validator); empty: not checked."),
        d("sasl.oauthbearer.expected.issuer", "string", None, "The iss a token must have (JWKS validator)."),
        d("sasl.oauthbearer.sub.claim.name", "string", "sub", "Claim holding the principal (JWKS validator; the "
          "unsecured validator reads unsecuredValidatorPrincipalClaimName)."),
        d("sasl.oauthbearer.scope.claim.name", "string", "scope", "Claim holding the scope (JWKS validator)."),
        d("sasl.oauthbearer.clock.skew.seconds", "int", 30, "Clock skew allowed when checking exp, iat and nbf "
          "(JWKS validator).", AtLeast(0)),
    ]


SECURITY_DEFS: dict[str, ConfigDef] = {c.name: c for c in security_defs()}


def split_listener_name(name: str) -> tuple[str, str] | None:
    """`listener.name.sasl_ssl.ssl.client.auth` -> ("SASL_SSL", "ssl.client.auth"); None for another name.
    The listener part is the one segment after the prefix (listener names contain no dots)."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, sep, rest = name[len(LISTENER_PREFIX):].partition(".")
    if not sep or not listener or not rest:
        return None
    return listener.upper(), rest


def is_listener_setting(name: str) -> bool:
    """listener.name.<l>.<security setting>, or .<mechanism>.<security setting> (JAAS, callback handler)."""
    split = split_listener_name(name)
    if split is None:
        return False
    rest = split[1]
    mechanism, _, setting = rest.partition(".")
    return rest in SECURITY_DEFS or (mechanism.upper() in (*SASL_MECHANISMS, "GSSAPI") and setting in SECURITY_DEFS)


def listener_setting(get: Any, overrides: Mapping[str, str], listener: str, name: str) -> Any:
    """The value of security setting `name` for `listener`: its listener.name.<listener>. override
    (parsed as the base setting) if set, else the broker-wide value (Kafka's valuesWithPrefixOverride)."""
    raw = overrides.get(f"{LISTENER_PREFIX}{listener.lower()}.{name}")
    if raw is not None:
        return SECURITY_DEFS[name].parse(raw)
    return get(name)


def mechanism_jaas_config(get: Any, overrides: Mapping[str, str], listener: str, mechanism: str) -> str | None:
    """The JAAS configuration for `mechanism` on `listener`: listener.name.<l>.<mechanism>.sasl.jaas.config
    (as Kafka's JaasContext.loadServerContext), else listener.name.<l>.sasl.jaas.config, else sasl.jaas.config."""
    prefix = f"{LISTENER_PREFIX}{listener.lower()}."
    for key in (f"{prefix}{mechanism.lower()}.sasl.jaas.config", f"{prefix}sasl.jaas.config"):
        if overrides.get(key):
            return overrides[key]
    value: str | None = get("sasl.jaas.config")
    return value or None


def mechanism_setting(get: Any, overrides: Mapping[str, str], listener: str, mechanism: str, name: str) -> Any:
    """listener.name.<l>.<mechanism>.<name>, else the listener's or broker-wide value."""
    raw = overrides.get(f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.{name}")
    if raw is not None:
        return SECURITY_DEFS[name].parse(raw)
    return listener_setting(get, overrides, listener, name)


def validate_listener_settings(overrides: Mapping[str, str]) -> None:
    """Parse every listener-prefixed override with its base setting's rules (ConfigError if invalid);
    which mechanisms can be served is checked when the listener starts."""
    for key, raw in overrides.items():
        split = split_listener_name(key)
        if split is None:
            continue
        setting = split[1] if split[1] in SECURITY_DEFS else split[1].partition(".")[2]
        if setting in SECURITY_DEFS:
            SECURITY_DEFS[setting].parse(raw)
