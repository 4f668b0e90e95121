"""Certificates for the TLS tests, made on the spot with `cryptography`: a CA,
server and client certificates it signs, and ones it does not (another CA's,
self-signed), each written as PEM files into a directory."""
import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAY = datetime.timedelta(days=1)


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path, *blobs):
    with open(path, "wb") as f:
        for blob in blobs:
            f.write(blob)
    return str(path)


def _key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Authority:
    """A CA whose certificate is at .cert (PEM) in directory."""

    def __init__(self, directory, name):
        self.directory = directory
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.certificate = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - DAY).not_valid_after(now + DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.cert = _write(os.path.join(directory, name + "-ca.pem"),
                           self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, name, server=True, hosts=("localhost", "127.0.0.1"), expired=False):
        """A certificate for name signed by this CA: (cert path, key path);
        expired: one whose validity ended an hour ago."""
        return _leaf(self.directory, name, server, hosts, self.certificate.subject, self.key, expired)


def self_signed(directory, name, hosts=("localhost", "127.0.0.1")):
    """A server certificate signed by its own key: (cert path, key path)."""
    return _leaf(directory, name, True, hosts, None, None)


def _leaf(directory, name, server, hosts, issuer, issuer_key, expired=False):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    if expired:
        now -= DAY + datetime.timedelta(hours=1)
    sans = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder().subject_name(_name(name)).issuer_name(issuer or _name(name))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - DAY).not_valid_after(now + DAY)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    certificate = builder.sign(issuer_key or key, hashes.SHA256())
    cert = _write(os.path.join(directory, name + ".pem"), certificate.public_bytes(serialization.Encoding.PEM))
    return cert, _write(os.path.join(directory, name + "-key.pem"), _key_pem(key))


def serial_of(pem_path):
    """The serial number of the certificate in a PEM file."""
    with open(pem_path, "rb") as f:
        return x509.load_pem_x509_certificate(f.read()).serial_number


class Pki:
    """What the TLS tests use, in directory: a CA ("queue") and the server and
    client certificates it signs (each a (cert, key) pair of paths), another CA
    and a client certificate it signs, and a self-signed server certificate."""

    def __init__(self, directory):
        self.directory = directory
        self.ca = Authority(directory, "queue")
        self.other_ca = Authority(directory, "stranger")
        self.server = self.ca.issue("server")
        self.server2 = self.ca.issue("server2")
        self.client = self.ca.issue("worker", server=False)
        self.foreign_client = self.other_ca.issue("intruder", server=False)
        self.expired = self.ca.issue("expired", expired=True)
        self.expired_client = self.ca.issue("expired-worker", server=False, expired=True)
        self.self_signed = self_signed(directory, "lonely")
