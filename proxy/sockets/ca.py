"""The local certificate authority that intercepted hosts are served with (docs/architecture.md,
"The forward proxy").

Created on first use in ``$CTXSCOPE_HOME/ca/``: ``ca.pem`` (the certificate clients trust),
``ca-key.pem`` (owner-only), and ``bundle.pem`` (the system's trusted roots plus ours, for clients
whose variable replaces the roots instead of adding to them). A leaf certificate per host is made
in memory, signed by the CA, and kept for the process's life.

The CA carries X.509 name constraints: it may vouch only for the intercepted hosts (DNS subtrees)
and for no IP address unless an upstream is one, so trusting it (``ctxscope ca env``) trusts it for
nothing else. A CA that does not permit every host asked for (an upstream was added, or the CA
predates the constraints) is replaced by a new one: that is the rotation. ``bundle.pem`` is
rewritten whenever it is not exactly the system's roots plus the current CA, so it never trusts an
old CA, nor stays as someone planted it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Collection
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "ctxscope local CA"
CA_DAYS = 3650
LEAF_DAYS = 365  # clients refuse server certificates valid for much longer


def _private_write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` atomically, created with ``mode`` (never readable by others first)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _system_roots() -> bytes:
    paths = ssl.get_default_verify_paths()
    for name in (paths.cafile, paths.openssl_cafile):
        if name and Path(name).is_file():
            return Path(name).read_bytes()
    return b""


class LocalCA:
    """The CA on disk, and the TLS contexts that present its leaf certificates."""

    def __init__(self, folder: Path, hosts: Collection[str]):
        self.folder = folder
        self.hosts = sorted({h.lower().rstrip(".") for h in hosts})
        self.cert_path = folder / "ca.pem"
        self.key_path = folder / "ca-key.pem"
        self.bundle_path = folder / "bundle.pem"
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._load_or_create()

    def _load_or_create(self) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        loaded = self._load() if self.cert_path.is_file() and self.key_path.is_file() else None
        if loaded is not None and permits_all(loaded[1], self.hosts):
            self.key, self.cert = loaded
        else:  # none yet, or one that may not vouch for every intercepted host: a new CA
            self.key = ec.generate_private_key(ec.SECP256R1())
            self.cert = self._make_ca()
            _private_write(
                self.key_path,
                self.key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                ),
                0o600,
            )
            _private_write(self.cert_path, self.cert.public_bytes(serialization.Encoding.PEM), 0o644)
        self._write_bundle()

    def _load(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        os.chmod(self.key_path, 0o600)
        key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{self.key_path}: not the EC key ctxscope makes")
        cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        if cert.public_key() != key.public_key():
            raise ValueError(f"{self.cert_path} is not the certificate of {self.key_path}")
        return key, cert

    def _write_bundle(self) -> None:
        """bundle.pem is exactly the system's roots and the current CA: rewritten when it is anything else."""
        wanted = _system_roots().rstrip() + b"\n" + self.cert.public_bytes(serialization.Encoding.PEM)
        try:
            same = self.bundle_path.read_bytes() == wanted
        except OSError:
            same = False
        if not same:
            _private_write(self.bundle_path, wanted, 0o644)

    def _constraints(self) -> x509.NameConstraints:
        dns: list[x509.GeneralName] = []
        ips: list[x509.GeneralName] = []
        for host in self.hosts:
            try:
                ips.append(x509.IPAddress(ipaddress.ip_network(host)))
            except ValueError:
                dns.append(x509.DNSName(host))
        # No iPAddress subtree in the permitted list would leave every address permitted: exclude them all.
        excluded = (
            None
            if ips
            else [x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")), x509.IPAddress(ipaddress.ip_network("::/0"))]
        )
        return x509.NameConstraints(permitted_subtrees=dns + ips or None, excluded_subtrees=excluded)

    def _make_ca(self) -> x509.Certificate:
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ctxscope"),
            ]
        )
        now = datetime.datetime.now(datetime.UTC)
        public = self.key.public_key()
        return (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(self._constraints(), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def _leaf(self, host: str) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        now = datetime.datetime.now(datetime.UTC)
        ca_ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for ``host`` (HTTP/1.1 only)."""
        ctx = self._contexts.get(host)
        if ctx is None:
            cert_pem, key_pem = self._leaf(host)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.set_alpn_protocols(["http/1.1"])
            # ssl loads a chain only from files: write them to a private temporary folder, then drop it.
            with tempfile.TemporaryDirectory() as tmp:
                cert_file, key_file = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
                cert_file.write_bytes(cert_pem)
                _private_write(key_file, key_pem, 0o600)
                ctx.load_cert_chain(cert_file, key_file)
            self._contexts[host] = ctx
        return ctx


def permits_all(cert: x509.Certificate, hosts: Collection[str]) -> bool:
    """Whether the CA ``cert`` has name constraints that permit each of ``hosts`` (a CA without
    them permits everything, which is what this refuses)."""
    try:
        constraints = cert.extensions.get_extension_for_class(x509.NameConstraints).value
    except x509.ExtensionNotFound:
        return False
    permitted = constraints.permitted_subtrees or []
    for host in hosts:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None:
            ok = any(isinstance(n, x509.IPAddress) and address in n.value for n in permitted)  # type: ignore[operator]  # cryptography: a constraint's value is a network
        else:
            ok = any(
                isinstance(n, x509.DNSName) and (host == n.value or host.endswith("." + n.value)) for n in permitted
            )
        if not ok:
            return False
    return True
