"""TLS for SSL and SASL_SSL listeners: an `ssl.SSLContext` built from Kafka's ssl.* settings
(PEM inline or in files, PKCS12 read with the `cryptography` library), and the principal of a
client certificate's distinguished name mapped with ssl.principal.mapping.rules.

asyncio runs the handshakes on the event loop without blocking it (a stalled peer costs a
pending read, and ssl_handshake_timeout bounds it)."""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sharebroker.config.definitions import ConfigError

# A setting of one listener: Kafka's valuesWithPrefixOverride (listener.name.<l>. first).
Setting = Callable[[str], Any]

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(setting, f"Cannot read {setting} {path}: {exc.strerror or exc}") from None


def _pkcs12(data: bytes, password: str | None, setting: str) -> tuple[Any, Any, list[Any]]:
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError(setting, f"Cannot read the PKCS12 store of {setting}: {exc} (wrong password?)") from None


def _jks_error(setting: str) -> ConfigError:
    return ConfigError(setting, f"{setting}: JKS stores are not readable by sharebroker. Convert with "
                       "`keytool -importkeystore -srckeystore store.jks -destkeystore store.p12 -deststoretype PKCS12` "
                       "and set the type to PKCS12, or use PEM (ssl.keystore.type=PEM / ssl.truststore.type=PEM).")


def load_key_material(ctx: ssl.SSLContext, get: Setting) -> None:
    """The broker's key and certificate chain into `ctx`."""
    kind = (get("ssl.keystore.type") or "JKS").upper()
    location = get("ssl.keystore.location")
    key_password = get("ssl.key.password")
    if kind == "PEM":
        chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
        if location and (chain or key):
            raise ConfigError("ssl.keystore.location", "Both ssl.keystore.location and ssl.keystore.certificate.chain/"
                              "ssl.keystore.key are set; give one of them")
        if location:  # one PEM file holding the (encrypted or not) private key and the chain
            _read(location, "ssl.keystore.location")
            _load_chain(ctx, location, None, key_password)
            return
        if not chain or not key:
            raise ConfigError("ssl.keystore.certificate.chain", "A TLS listener with ssl.keystore.type=PEM needs "
                              "ssl.keystore.certificate.chain and ssl.keystore.key (or ssl.keystore.location)")
        _load_chain(ctx, None, _pem_text(chain) + _pem_text(key), key_password)
        return
    if not location:
        raise ConfigError("ssl.keystore.location", "A TLS listener needs a key store: ssl.keystore.location (PKCS12 "
                          "or PEM) or ssl.keystore.type=PEM with ssl.keystore.certificate.chain and ssl.keystore.key")
    if kind == "JKS":
        raise _jks_error("ssl.keystore.location")
    if kind != "PKCS12":
        raise ConfigError("ssl.keystore.type", f"Unsupported key store type {kind}: use PEM or PKCS12")
    from cryptography.hazmat.primitives import serialization

    key_obj, cert, extra = _pkcs12(_read(location, "ssl.keystore.location"),
                                   get("ssl.keystore.password") or key_password, "ssl.keystore.location")
    if key_obj is None or cert is None:
        raise ConfigError("ssl.keystore.location", f"The PKCS12 key store {location} holds no private key and certificate")
    pem = key_obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    for c in (cert, *extra):
        pem += c.public_bytes(serialization.Encoding.PEM)
    _load_chain(ctx, None, pem.decode("ascii"), None)


def _pem_text(value: str) -> str:
    # Kafka lets a PEM value in a properties file run on one line; restore the line breaks it needs.
    text = value.strip()
    if "\n" not in text:
        text = re.sub(r"(-----(?:BEGIN|END) [A-Z ]+-----)", r"\n\1\n", text)
        text = "\n".join(line.strip() for line in text.splitlines() if line.strip())
    return text + "\n"


def _load_chain(ctx: ssl.SSLContext, path: str | None, pem: str | None, password: str | None) -> None:
    # ssl only loads key material from files: an inline one goes through a private file, removed at once.
    tmp = None
    try:
        if pem is not None:
            fd, tmp = tempfile.mkstemp(prefix="sharebroker-key-", suffix=".pem")
            with os.fdopen(fd, "w") as f:
                f.write(pem)
            path = tmp
        assert path is not None
        ctx.load_cert_chain(path, password=password or None)
    except ssl.SSLError as exc:
        raise ConfigError("ssl.keystore.key", f"Cannot load the broker's key and certificate: {exc.reason or exc} "
                          "(a wrong or missing ssl.key.password?)") from None
    finally:
        if tmp is not None:
            os.unlink(tmp)


def load_trust(ctx: ssl.SSLContext, get: Setting) -> bool:
    """The CAs client certificates are checked against; False when no trust store is configured."""
    kind = (get("ssl.truststore.type") or "JKS").upper()
    location = get("ssl.truststore.location")
    if kind == "PEM":
        certs = get("ssl.truststore.certificates")
        if certs:
            cadata = _pem_text(certs)
        elif location:
            cadata = _read(location, "ssl.truststore.location").decode("ascii", "replace")
        else:
            return False
        try:
            ctx.load_verify_locations(cadata=cadata)
        except ssl.SSLError as exc:
            raise ConfigError("ssl.truststore.certificates", f"Cannot load the trusted certificates: {exc}") from None
        return True
    if not location:
        return False
    if kind == "JKS":
        raise _jks_error("ssl.truststore.location")
    if kind != "PKCS12":
        raise ConfigError("ssl.truststore.type", f"Unsupported trust store type {kind}: use PEM or PKCS12")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    data = _read(location, "ssl.truststore.location")
    password = get("ssl.truststore.password")
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError("ssl.truststore.location", f"Cannot read the PKCS12 trust store: {exc}") from None
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    if not certs:
        raise ConfigError("ssl.truststore.location", f"The PKCS12 trust store {location} holds no certificate")
    ctx.load_verify_locations(cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs))
    return True


def server_context(get: Setting) -> ssl.SSLContext:
    """The server-side SSL context of one listener; ConfigError naming the setting at fault."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [v for v in get("ssl.enabled.protocols") if v in _VERSIONS]
    if not versions:
        raise ConfigError("ssl.enabled.protocols", "No supported TLS version enabled; use TLSv1.2 and/or TLSv1.3")
    ctx.minimum_version = min((_VERSIONS[v] for v in versions), key=lambda v: v.value)
    ctx.maximum_version = max((_VERSIONS[v] for v in versions), key=lambda v: v.value)
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        try:
            ctx.set_ciphers(":".join(ciphers))
        except ssl.SSLError:
            raise ConfigError("ssl.cipher.suites", f"No usable cipher among {', '.join(ciphers)} "
                              "(OpenSSL names, e.g. ECDHE-RSA-AES256-GCM-SHA384)") from None
    load_key_material(ctx, get)
    trusted = load_trust(ctx, get)
    auth = get("ssl.client.auth")
    if auth != "none" and not trusted:
        raise ConfigError("ssl.client.auth", f"ssl.client.auth={auth} needs a trust store to verify client "
                          "certificates: ssl.truststore.location or ssl.truststore.certificates")
    ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL}.get(auth, ssl.CERT_NONE)
    return ctx


# -- principal from a certificate ------------------------------------------------------------------

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)


class NoMatchingRule(Exception):
    pass


class PrincipalMapper:
    """Kafka's SslPrincipalMapper: the first rule that matches the whole DN gives the name; DEFAULT
    gives the DN itself."""

    def __init__(self, rules_text: str | None) -> None:
        text = (rules_text or "DEFAULT").strip()
        self.rules: list[tuple[re.Pattern[str], str, str] | None] = []  # None: DEFAULT
        for m in _RULE_SPLITTER.finditer(text):
            rule = m.group(1)
            if m.start() == m.end():
                break
            parsed = _RULE_PARSER.match(rule)
            if parsed is None or parsed.end() != len(rule):
                raise ConfigError("ssl.principal.mapping.rules", f"Invalid rule: {rule}")
            if parsed.group(1) is not None:
                self.rules.append(None)
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as exc:
                    raise ConfigError("ssl.principal.mapping.rules", f"Invalid rule: {rule}: {exc}") from None
                self.rules.append((pattern, _java_replacement(parsed.group(3), pattern.groups), parsed.group(4)))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            if pattern.fullmatch(dn):
                result = pattern.sub(replacement, dn)
                return result.lower() if case == "L" else result.upper() if case == "U" else result
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self.rules}")


def _java_replacement(text: str, groups: int) -> str:
    """A Java replaceAll replacement ($1, \\$ escapes) as a Python one; a back reference beyond the
    groups is shortened or kept literal, as Kafka does."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        if c == "$":
            m = re.match(r"\d+", text[i + 1:])
            if m:
                digits = m.group(0)
                n = int(digits)
                while n > groups and n >= 10:
                    n //= 10
                if n > groups:
                    out.append("$" + digits)
                else:
                    used = len(str(n))
                    out.append(f"\\g<{n}>" + digits[used:])
                i += 1 + len(digits)
                continue
        out.append(c.replace("\\", "\\\\"))
        i += 1
    return "".join(out)


def peer_distinguished_name(ssl_object: Any) -> str | None:
    """The RFC 2253 subject of the client's certificate (as Java's X500Principal.getName()), or
    None when the client sent none."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return None
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


__all__ = ["NoMatchingRule", "PrincipalMapper", "peer_distinguished_name", "server_context"]
