"""The local CA: its name constraints hold in a real TLS client (Python's ssl, i.e. OpenSSL), a CA
that may not vouch for a host is replaced, and bundle.pem always holds the current CA and no old
one, whatever was planted there."""

from __future__ import annotations

import contextlib
import datetime
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ctxscope.proxy.sockets.ca import LocalCA

HOSTS = ("api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com")


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> None:
    """A full TLS handshake between two in-memory ends; raises the client's verification error."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=name)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        done = 0
        for end, out, peer_in in ((c, c_out, s_in), (s, s_out, c_in)):
            try:
                end.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
            peer_in.write(out.read())
        if done == 2:
            return
    raise AssertionError("handshake did not finish")


def _forged_leaf(ca: LocalCA, host: str) -> ssl.SSLContext:
    """What someone holding the CA key could sign: a leaf for any host (the constraints must stop it)."""
    cert_pem, key_pem = ca._leaf(host)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    folder = ca.folder / "forged"
    folder.mkdir(exist_ok=True)
    (folder / "c.pem").write_bytes(cert_pem)
    (folder / "k.pem").write_bytes(key_pem)
    ctx.load_cert_chain(folder / "c.pem", folder / "k.pem")
    return ctx


def test_the_ca_vouches_for_the_intercepted_hosts_only(tmp_path):
    ca = LocalCA(tmp_path / "ca", HOSTS + ("llm.example.test",))
    client = ssl.create_default_context(cafile=str(ca.bundle_path))
    for host in ("api.openai.com", "llm.example.test"):
        _handshake(ca.server_context(host), client, host)
    for host in ("github.com", "pypi.org", "registry.npmjs.org", "evil-api.openai.com.example"):
        with pytest.raises(ssl.SSLCertVerificationError, match=r"(?i)name constraint|permitted|excluded"):
            _handshake(_forged_leaf(ca, host), client, host)
    with pytest.raises(ssl.SSLCertVerificationError):  # an IP address: excluded
        _handshake(_forged_leaf(ca, "127.0.0.1"), client, "127.0.0.1")


def test_an_ip_upstream_is_permitted_and_other_addresses_are_not(tmp_path):
    ca = LocalCA(tmp_path / "ca", ("127.0.0.1",))
    client = ssl.create_default_context(cafile=str(ca.bundle_path))
    _handshake(ca.server_context("127.0.0.1"), client, "127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(_forged_leaf(ca, "127.0.0.2"), client, "127.0.0.2")


def _unconstrained_ca(folder: Path) -> bytes:
    """A CA as the previous version made it: no name constraints."""
    folder.mkdir(mode=0o700, parents=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ctxscope local CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (folder / "ca.pem").write_bytes(pem)
    (folder / "ca-key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (folder / "bundle.pem").write_bytes(pem)
    return pem


def test_a_ca_that_may_not_vouch_for_every_host_is_replaced_and_the_bundle_follows(tmp_path):
    folder = tmp_path / "ca"
    old = _unconstrained_ca(folder)
    ca = LocalCA(folder, HOSTS)  # the unconstrained CA is rotated away
    first = ca.cert_path.read_bytes()
    assert first != old
    bundle = ca.bundle_path.read_bytes()
    assert first in bundle and old not in bundle
    assert LocalCA(folder, HOSTS[:1]).cert_path.read_bytes() == first  # a subset: the same CA
    ca = LocalCA(folder, (*HOSTS, "new.example.test"))  # an upstream added: a new CA
    second = ca.cert_path.read_bytes()
    bundle = ca.bundle_path.read_bytes()
    assert second != first and second in bundle and first not in bundle and old not in bundle


def test_a_planted_or_stale_bundle_is_rebuilt(tmp_path):
    folder = tmp_path / "ca"
    ca = LocalCA(folder, HOSTS)
    current = ca.cert_path.read_bytes()
    planted = _unconstrained_ca(tmp_path / "elsewhere")
    for content in (b"", b"not a certificate\n", planted, ca.bundle_path.read_bytes().replace(current, planted)):
        ca.bundle_path.write_bytes(content)
        LocalCA(folder, HOSTS)
        bundle = ca.bundle_path.read_bytes()
        assert current in bundle and planted not in bundle
    with contextlib.suppress(FileNotFoundError):
        ca.bundle_path.unlink()
    LocalCA(folder, HOSTS)
    assert current in ca.bundle_path.read_bytes()
