"""Where authentication meets authorization and the tools: the client address ACL hosts are
matched against (Java's form, as Kafka), and the tools' --command-config security properties."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharebroker.broker.connection import java_host_address
from sharebroker.cli.client_security import ClientSecurity
from sharebroker.cli.wire import ToolError


@pytest.mark.parametrize(("peer", "host"), [
    ("127.0.0.1", "127.0.0.1"), ("::1", "0:0:0:0:0:0:0:1"), ("::ffff:10.0.0.1", "10.0.0.1"),
    ("2001:db8::ab", "2001:db8:0:0:0:0:0:ab"), ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
])
def test_client_address_as_java_writes_it(peer: str, host: str) -> None:
    assert java_host_address(peer) == host


def test_plaintext_and_sasl_properties() -> None:
    assert ClientSecurity.from_properties({}).protocol == "PLAINTEXT"
    sec = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                            'password="a-pw";'})
    assert (sec.mechanism, sec.username, sec.password, sec.ssl_context) == ("SCRAM-SHA-512", "alice", "a-pw", None)
    oauth = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                            'unsecuredLoginStringClaim_sub="alice";'})
    assert oauth.token.count(".") == 2


@pytest.mark.parametrize(("props", "message"), [
    ({"security.protocol": "TLS"}, "Invalid value TLS for configuration security.protocol"),
    ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism=GSSAPI is not supported by these tools"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": "nonsense"},
     "sasl.jaas.config"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ts.jks"}, "JKS stores are not readable"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": "/nonexistent/ca.pem"},
     "Cannot read ssl.truststore.location"),
])
def test_refused_properties_name_the_fix(props: dict[str, str], message: str) -> None:
    with pytest.raises(ToolError) as err:
        ClientSecurity.from_properties(props)
    assert message in err.value.message


def test_pem_trust_store(tmp_path: Path) -> None:
    from sharebroker.cli.certs import generate

    certs = generate(tmp_path / "certs")
    sec = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                          "ssl.truststore.location": str(certs.ca),
                                          "ssl.endpoint.identification.algorithm": ""})
    assert sec.ssl_context is not None and not sec.ssl_context.check_hostname
    assert len(sec.ssl_context.get_ca_certs()) == 1
