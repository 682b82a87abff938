"""The pieces of authentication without a socket: listener-prefixed settings, JAAS values, Kafka's
SSL principal mapping rules, the SCRAM exchange (RFC 7677's example), PLAIN and the unsecured
OAUTHBEARER validator."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from sharebroker.broker.security.jaas import parse_jaas
from sharebroker.broker.security.oauthbearer import OAuthBearerServer, UnsecuredValidator, unsecured_token
from sharebroker.broker.security.sasl import AuthFailed, PlainServer
from sharebroker.broker.security.scram import ScramCredentials, ScramError, ScramServer, credential_from_salted
from sharebroker.broker.security.tls import NoMatchingRule, PrincipalMapper
from sharebroker.config import BrokerConfig, ConfigError
from sharebroker.config.security_settings import listener_setting, mechanism_jaas_config


def test_listener_prefixed_settings_from_file_and_environment(tmp_path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("listeners=PLAINTEXT://:9092,SASL_SSL://:9093\nssl.client.auth=none\n"
                     "listener.name.sasl_ssl.ssl.client.auth=required\n")
    env = {"KAFKA_LISTENER_NAME_SASL__SSL_PLAIN_SASL_JAAS_CONFIG":
           'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'}
    cfg = BrokerConfig.load(props, env=env)
    assert cfg.unknown == []
    assert listener_setting(cfg.value, cfg.listener_settings, "SASL_SSL", "ssl.client.auth") == "required"
    assert listener_setting(cfg.value, cfg.listener_settings, "PLAINTEXT", "ssl.client.auth") == "none"
    assert 'user_a="b"' in (mechanism_jaas_config(cfg.value, cfg.listener_settings, "SASL_SSL", "PLAIN") or "")
    with pytest.raises(ConfigError):
        BrokerConfig.load(overrides={"listener.name.x.ssl.client.auth": "sometimes"})


def test_jaas_values() -> None:
    (module,) = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                           'password="a\\"b" user_admin="admin-secret" user_bob=plain;')
    assert module.flag == "required"
    assert module.options == {"username": "admin", "password": 'a"b', "user_admin": "admin-secret", "user_bob": "plain"}
    for bad in ("X required a=", "X required a=b", "X", "X sometimes;"):
        with pytest.raises(ConfigError):
            parse_jaas(bad)


@pytest.mark.parametrize("rules, dn, name", [
    ("DEFAULT", "CN=client,O=org", "CN=client,O=org"),
    ("RULE:^CN=(.*?),O=.*$/$1/,DEFAULT", "CN=client,O=org", "client"),
    ("RULE:^CN=(.*?),O=.*$/$1/U", "CN=client,O=org", "CLIENT"),
    ("RULE:^CN=([a-z]+)@x,.*$/$1/L, DEFAULT", "CN=Other,O=org", "CN=Other,O=org"),
    ("RULE:^CN=(.*),OU=(.*)$/$1@$2/", "CN=a,OU=b", "a@b"),
    ("RULE:^CN=(.*)$/$1\\/x/", "CN=a", "a/x"),
])
def test_ssl_principal_mapping_rules(rules: str, dn: str, name: str) -> None:
    assert PrincipalMapper(rules).name(dn) == name


def test_ssl_principal_mapping_without_a_matching_rule() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x"):
        PrincipalMapper("RULE:^CN=(a+)$/$1/").name("CN=x")
    with pytest.raises(ConfigError, match="Invalid rule"):
        PrincipalMapper("RULE:^CN=(a+)$/$1/X")


def test_scram_rfc7677_exchange(tmp_path) -> None:
    """RFC 7677 section 3: user "user", password "pencil", 4096 iterations."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    store = ScramCredentials(tmp_path)
    store.apply([("user", "SCRAM-SHA-256", credential_from_salted("SCRAM-SHA-256", salted, salt, 4096))], [])
    server = ScramServer("SCRAM-SHA-256", ScramCredentials(tmp_path))  # read back from the file
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    nonce = first.decode().split(",")[0][2:]
    assert nonce.startswith("rOprNGfwEbeRWgbNEkqO") and b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096" in first
    without_proof = f"c=biws,r={nonce}"
    auth = f"n=user,r=rOprNGfwEbeRWgbNEkqO,{first.decode()},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    final = server.evaluate(f"{without_proof},p={proof}".encode())
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    assert final == b"v=" + base64.b64encode(hmac.new(server_key, auth, "sha256").digest())
    assert server.complete and server.user == "user"
    bad = ScramServer("SCRAM-SHA-256", store)
    first = bad.evaluate(b"n,,n=user,r=abc")
    with pytest.raises(ScramError):
        bad.evaluate(f"c=biws,r={first.decode().split(',')[0][2:]},p={base64.b64encode(b'x' * 32).decode()}".encode())
    for garbage in (b"", b"n,,", b"y,,n=user,r=a", b"n,,n=us=er,r=a", b"\xff"):
        with pytest.raises(ScramError):
            ScramServer("SCRAM-SHA-256", store).evaluate(garbage)
    with pytest.raises(ScramError):
        ScramServer("SCRAM-SHA-512", store).evaluate(b"n,,n=user,r=a")  # no SHA-512 credential


def test_plain() -> None:
    server = PlainServer({"alice": "secret"})
    assert server.evaluate(b"\0alice\0secret") == b"" and server.user == "alice"
    for token, message in ((b"\0alice\0wrong", "Invalid username or password"), (b"\0\0x", "username not specified"),
                           (b"\0alice\0", "password not specified"), (b"alice", "expected 3 tokens, got 1"),
                           (b"bob\0alice\0secret", "authorization id that is different")):
        with pytest.raises(AuthFailed, match=message):
            PlainServer({"alice": "secret"}).evaluate(token)


def test_unsecured_oauthbearer_validator() -> None:
    def initial(token: str) -> bytes:
        return f"n,,\x01auth=Bearer {token}\x01\x01".encode()

    server = OAuthBearerServer(UnsecuredValidator({}))
    assert server.evaluate(initial(unsecured_token("erin"))) == b"" and server.user == "erin"
    expired = OAuthBearerServer(UnsecuredValidator({}))
    assert expired.evaluate(initial(unsecured_token("erin", lifetime_s=-10))) == b'{"status":"invalid_token"}'
    scoped = OAuthBearerServer(UnsecuredValidator({"unsecuredValidatorRequiredScope": "write"}))
    assert scoped.evaluate(initial(unsecured_token("erin", scope="read"))) == (
        b'{"status":"insufficient_scope", "scope":"write"}')
    with pytest.raises(Exception, match='insufficient_scope'):
        scoped.evaluate(b"\x01")
    ok = OAuthBearerServer(UnsecuredValidator({"unsecuredValidatorRequiredScope": "write"}))
    assert ok.evaluate(initial(unsecured_token("erin", scope="read write"))) == b""
