"""The embedded broker's TLS material, made on its first secured start: a private CA and a
certificate for 127.0.0.1 / localhost signed by it. Clients trust the CA (``ca.pem``); the
broker serves ``broker.p12``. Everything lives under ``<data_dir>/broker/tls/``, readable by
its owner only, and is made again when removed.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from spark_jobs.runtime.private_files import private_dir, write_private

VALID_DAYS = 825


@dataclass(frozen=True)
class BrokerTls:
    ca_file: Path  # PEM: what clients trust
    keystore: Path  # PKCS#12: the broker's key and certificate chain
    keystore_password: str


def ensure(directory: Path) -> BrokerTls:
    private_dir(directory)
    ca_file, keystore, password_file = directory / "ca.pem", directory / "broker.p12", directory / "keystore.pass"
    if not (ca_file.exists() and keystore.exists() and password_file.exists()):
        _make(ca_file, keystore, password_file)
    return BrokerTls(ca_file, keystore, password_file.read_text())


def _make(ca_file: Path, keystore: Path, password_file: Path) -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sigflow embedded broker CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    # Clients verify the host name (ssl.endpoint.identification.algorithm=https by default):
    # the certificate names every way the embedded broker is reached.
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    password = secrets.token_urlsafe(24)
    write_private(password_file, password.encode())
    write_private(keystore, pkcs12.serialize_key_and_certificates(
        b"broker", key, cert, [ca_cert], serialization.BestAvailableEncryption(password.encode())))
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

