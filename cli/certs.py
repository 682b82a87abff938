"""`sharebroker certs DIR`: a throw-away CA, a broker certificate and a client certificate for TLS
listeners in development and tests (made with the `cryptography` library; never commit them).

Writes, in DIR: ca.pem (the CA certificate: the clients' trust store, and the broker's for client
certificates), ca-key.pem, broker.pem + broker-key.pem (the broker's chain and key; also
broker-keystore.pem, key and chain in one file for ssl.keystore.location), client.pem +
client-key.pem (CN=client, for ssl.client.auth), and broker.p12 / client.p12 (PKCS12, password
from --password) for Java clients."""

from __future__ import annotations

import argparse
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1", "sharebroker")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("certs", help="generate a development CA, broker and client certificates",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory", help="where to write the PEM and PKCS12 files (created if missing)")
    p.add_argument("--host", action="append", dest="hosts", metavar="NAME",
                   help="a DNS name or IP address the broker certificate is valid for (repeatable; default: "
                        f"{', '.join(DEFAULT_HOSTS)})")
    p.add_argument("--client-cn", default="client", help="common name of the client certificate (default client)")
    p.add_argument("--password", default="changeit", help="password of the PKCS12 files (default changeit)")
    p.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    p.add_argument("--if-missing", action="store_true",
                   help="do nothing when DIR already holds ca.pem (a compose service run at every `up`)")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.if_missing and (Path(args.directory) / "ca.pem").exists():
        print(f"certificates already in {args.directory}")
        return 0
    paths = generate(Path(args.directory), hosts=tuple(args.hosts or DEFAULT_HOSTS), client_cn=args.client_cn,
                     password=args.password, days=args.days)
    for name, path in sorted(vars(paths).items()):
        print(f"{name}: {path}")
    return 0


@dataclass(frozen=True)
class CertPaths:
    ca: Path
    ca_key: Path
    broker_chain: Path
    broker_key: Path
    broker_keystore: Path
    broker_p12: Path
    client_chain: Path
    client_key: Path
    client_p12: Path


def generate(directory: Path, *, hosts: tuple[str, ...] = DEFAULT_HOSTS, client_cn: str = "client",
             password: str = "changeit", days: int = 365) -> CertPaths:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sharebroker dev"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("sharebroker dev CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usage: x509.ObjectIdentifier, sans: tuple[str, ...]) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False))
        if sans:
            alt: list[x509.GeneralName] = []
            for host in sans:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    alt.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    broker, broker_key = leaf(hosts[0] if hosts else "localhost", ExtendedKeyUsageOID.SERVER_AUTH, hosts)
    client, client_key = leaf(client_cn, ExtendedKeyUsageOID.CLIENT_AUTH, ())

    pem = serialization.Encoding.PEM

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())

    def write(file: str, data: bytes, private: bool = False) -> Path:
        path = directory / file
        path.write_bytes(data)
        if private:
            path.chmod(0o600)
        return path

    encryption = serialization.BestAvailableEncryption(password.encode())
    return CertPaths(
        ca=write("ca.pem", ca.public_bytes(pem)),
        ca_key=write("ca-key.pem", key_pem(ca_key), True),
        broker_chain=write("broker.pem", broker.public_bytes(pem) + ca.public_bytes(pem)),
        broker_key=write("broker-key.pem", key_pem(broker_key), True),
        broker_keystore=write("broker-keystore.pem", key_pem(broker_key) + broker.public_bytes(pem)
                              + ca.public_bytes(pem), True),
        broker_p12=write("broker.p12", pkcs12.serialize_key_and_certificates(b"broker", broker_key, broker, [ca],
                                                                             encryption), True),
        client_chain=write("client.pem", client.public_bytes(pem)),
        client_key=write("client-key.pem", key_pem(client_key), True),
        client_p12=write("client.p12", pkcs12.serialize_key_and_certificates(b"client", client_key, client, [ca],
                                                                             encryption), True),
    )


__all__ = ["CertPaths", "DEFAULT_HOSTS", "add_parser", "generate"]
