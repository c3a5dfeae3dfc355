"""The local broker's secured mode: TLS, SASL users, client certificates and ACLs, as a
production cluster has them.

`LocalKafkaBroker(..., security=BrokerSecurity(...))` serves clients on two listeners, both TLS
with a certificate made for the broker by a CA of its own (written under the broker's data
directory, `ca.pem` for the clients):

- SASL_SSL, where a user signs in with SCRAM-SHA-512 (users created when the storage is
  formatted, KIP-900, so they exist before the first start) or PLAIN (the same users and
  passwords);
- SSL with client authentication required (mutual TLS): a client shows a certificate the same CA
  signed (`client_certificate`), and its principal is the certificate's common name.

Kafka's `StandardAuthorizer` gives no access unless an ACL grants it. `admin` is the super user
the broker itself and the tests' set-up use; every other principal gets what `grant` gives it.

The controller listener (the broker's own link to its quorum, 127.0.0.1 only) authenticates with
SASL/PLAIN as `admin`: SCRAM users live in the metadata log the controller serves, so a
controller cannot check them before it has read that log.
"""

from __future__ import annotations

import datetime
import ipaddress
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

# the ACL types by their modules: confluent_kafka.admin re-exports them without `__all__`
from confluent_kafka.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from compactor.errors import BrokerStartError

ADMIN = "admin"
MECHANISM = "SCRAM-SHA-512"
PLAIN = "PLAIN"
MUTUAL_TLS = "mutual TLS"  # a client's way in: its certificate, no password
WAYS_IN = (MECHANISM, PLAIN, MUTUAL_TLS)
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
TLS_DIR = "tls"


@dataclass(frozen=True)
class Grant:
    """One ACL: `principal` may do `operations` on a topic or group named `name` (or every name
    starting with it, `prefixed`)."""

    principal: str
    resource: str  # "topic" or "group"
    name: str
    operations: tuple[str, ...]  # Kafka's operation names: READ, WRITE, DESCRIBE, CREATE, ALL
    prefixed: bool = False


@dataclass(frozen=True)
class BrokerSecurity:
    """Users (name -> password, `admin` among them) of a secured local broker."""

    users: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if ADMIN not in self.users:
            raise ValueError(f"users: the broker's own user {ADMIN!r} needs a password")
        for name, password in self.users.items():
            if not name or any(c in name + password for c in ',=[]"'):
                raise ValueError(f'users: {name!r}: names and passwords may not hold , = [ ] or "')

    def ca_path(self, data_dir: Path) -> Path:
        """The PEM file of the CA that signed the broker's certificate: the clients' trust."""
        return data_dir / TLS_DIR / "ca.pem"

    def write_tls(self, data_dir: Path) -> None:
        """The CA (its key kept, to sign clients' certificates) and the broker's key and
        certificate (for 127.0.0.1 and localhost), made once."""
        tls = data_dir / TLS_DIR
        if (tls / "broker.pem").exists():
            return
        tls.mkdir(parents=True, exist_ok=True)
        ca_key, ca = _authority()
        self.ca_path(data_dir).write_bytes(_pem(ca))
        (tls / "ca.key").write_bytes(_pem(ca_key))
        key, broker = _signed(ca_key, ca, "127.0.0.1", server=True)
        (tls / "broker.pem").write_bytes(_pem(key) + _pem(broker))

    def client_certificate(self, user: str, data_dir: Path) -> tuple[Path, Path, Path]:
        """`user`'s key and certificate for mutual TLS, signed by the broker's CA, made once: the
        key (PKCS#8 PEM) and the certificate for librdkafka, and both in one file for Java's
        clients (Spark's Kafka source)."""
        tls = data_dir / TLS_DIR
        key_path, cert_path, both_path = (tls / f"{user}{suffix}" for suffix in (".key", ".pem", "-both.pem"))
        if not both_path.exists():
            from cryptography import x509
            from cryptography.hazmat.primitives import serialization

            ca = x509.load_pem_x509_certificate(self.ca_path(data_dir).read_bytes())
            ca_key = serialization.load_pem_private_key((tls / "ca.key").read_bytes(), None)
            key, cert = _signed(ca_key, ca, user, server=False)
            key_path.write_bytes(_pem(key))
            cert_path.write_bytes(_pem(cert))
            both_path.write_bytes(_pem(key) + _pem(cert))
        return key_path, cert_path, both_path

    def server_properties(
        self, port: int, controller_port: int, data_dir: Path, tls_port: int
    ) -> dict[str, str]:
        """The broker's listeners (SASL_SSL on `port`, mutual TLS on `tls_port`), TLS, SASL and
        authorizer settings."""
        admin = _quoted(self.users[ADMIN])
        plain_users = " ".join(f'user_{name}="{_quoted(pw)}"' for name, pw in sorted(self.users.items()))
        tls = data_dir / TLS_DIR
        return {
            "listeners": (
                f"SASL_SSL://127.0.0.1:{port},SSL://127.0.0.1:{tls_port},"
                f"CONTROLLER://127.0.0.1:{controller_port}"
            ),
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port},SSL://127.0.0.1:{tls_port}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": f"{MECHANISM},{PLAIN}",
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                f'{SCRAM_MODULE} required username="{ADMIN}" password="{admin}";'
            ),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {plain_users};",
            # mutual TLS: a certificate is required, and its common name is the principal
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": (
                f'{PLAIN_MODULE} required username="{ADMIN}" password="{admin}" user_{ADMIN}="{admin}";'
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls / "broker.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_path(data_dir)),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def format_args(self) -> list[str]:
        """StorageTool's arguments that create every user's SCRAM credential at format time."""
        args: list[str] = []
        for name, password in sorted(self.users.items()):
            args += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
        return args

    def kafka_block(self, user: str, data_dir: Path, way_in: str = MECHANISM) -> dict[str, Any]:
        """The config file's `kafka:` block for `user` on this broker, signing in with SCRAM,
        PLAIN or its certificate (`WAYS_IN`), as the deploying guide writes it (passwords in
        clear: tests and the demo only; a deployment reads them with `env:NAME`)."""
        ca = str(self.ca_path(data_dir))
        if way_in == MUTUAL_TLS:
            key, cert, both = self.client_certificate(user, data_dir)
            return {
                "security_protocol": "SSL",
                "ssl_ca_location": ca,
                "librdkafka": {"ssl.key.location": str(key), "ssl.certificate.location": str(cert)},
                "spark_source": {
                    "kafka.ssl.keystore.type": "PEM",
                    "kafka.ssl.keystore.location": str(both),
                },
            }
        if way_in not in WAYS_IN:
            raise ValueError(f"way_in {way_in!r}: one of {', '.join(WAYS_IN)}")
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": way_in,
            "sasl_username": user,
            "sasl_password": self.users[user],
            "ssl_ca_location": ca,
        }


def grant(admin_settings: Mapping[str, str], grants: Iterable[Grant], timeout: float = 30) -> None:
    """Create the ACLs, as the broker's `admin`."""
    bindings = [
        AclBinding(
            ResourceType.TOPIC if g.resource == "topic" else ResourceType.GROUP,
            g.name,
            ResourcePatternType.PREFIXED if g.prefixed else ResourcePatternType.LITERAL,
            f"User:{g.principal}",
            "*",
            AclOperation[operation],
            AclPermissionType.ALLOW,
        )
        for g in grants
        for operation in g.operations
    ]
    admin = AdminClient(dict(admin_settings))
    for binding, future in admin.create_acls(bindings, request_timeout=timeout).items():
        try:
            future.result(timeout)
        except Exception as exc:
            raise BrokerStartError(f"creating the ACL {binding} failed: {exc}") from exc
    _await_in_force(admin, bindings, timeout)


def _await_in_force(admin: AdminClient, bindings: list[AclBinding], timeout: float) -> None:
    """Return once the broker's authorizer holds every binding. In KRaft a created ACL is
    committed to the metadata log first and applied by the broker after, so a client asking at
    once can still be refused (seen under load as a producer's "Failed to acquire idempotence
    PID"); DescribeAcls answers from the same authorizer that decides."""
    # None matches any name, principal and host (the filter's documented meaning; its annotations
    # say str only)
    anything: Any = None
    every = AclBindingFilter(
        ResourceType.ANY,
        anything,
        ResourcePatternType.ANY,
        anything,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    wanted, deadline = set(bindings), time.monotonic() + timeout
    while True:
        missing = wanted - set(admin.describe_acls(every, request_timeout=timeout).result(timeout))
        if not missing:
            return
        if time.monotonic() > deadline:
            raise BrokerStartError(
                f"the broker did not apply the ACLs within {timeout:g} s: {sorted(missing)}"
            )
        time.sleep(0.1)


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _pem(item: Any) -> bytes:
    """A certificate, or a private key as unencrypted PKCS#8, in PEM."""
    from cryptography.hazmat.primitives import serialization

    pem = serialization.Encoding.PEM
    if hasattr(item, "public_bytes") and not hasattr(item, "private_bytes"):
        return bytes(item.public_bytes(pem))
    return bytes(item.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=365)


def _authority() -> tuple[Any, Any]:
    """A CA's private key and its self-signed certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    valid = _validity()
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "compactor local test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca


def _signed(ca_key: Any, ca: Any, name: str, server: bool) -> tuple[Any, Any]:
    """A key and its certificate for `name` (its common name), signed by the CA: a server's
    names 127.0.0.1 and localhost, a client's is its principal."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    valid = _validity()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
    )
    if server:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return key, builder.sign(ca_key, hashes.SHA256())
