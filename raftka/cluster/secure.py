"""What makes a local cluster secure (`raftka cluster up --secure`, ``Cluster.start(secure=True)``).

``SecureKit.create(root)`` makes, in ``<root>/secure/`` (mode 700):

- a private CA (``ca.pem``, its key ``ca-key.pem``) and one certificate for 127.0.0.1 and
  localhost that every node shows (``node.pem``: key and chain, what ``ssl.keystore.location``
  reads);
- two SCRAM users, created at format time (Kafka's ``--add-scram``, SCRAM-SHA-256 and -512 each):
  ``admin``, the super user the tools log in as, and ``broker``, the principal brokers log in to
  each other and to the controllers with (``broker.password``);

and ``<root>/client.properties`` (mode 600): Kafka's client properties with admin's login and the
CA, which every `raftka` command run against that directory reads by itself, and which Kafka's
own tools take as ``--command-config``.

Every listener is then SASL_SSL (SCRAM-SHA-256 and -512; PLAIN only where TLS hides the
password), the controllers' included, and Kafka's StandardAuthorizer decides on brokers and
controllers with ``super.users=User:admin;User:broker``: any other user may do nothing until an
ACL allows it. Only the HTTP listener (/health, /metrics) stays plain HTTP on loopback.

Passwords live in those files only (mode 600), never in ``cluster.json``, a log line or argv.
"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from raftka.cluster.certs import CertificateAuthority, write_pem
from raftka.cluster.errors import ClusterError
from raftka.cluster.state import write_atomic
from raftka.common.authorizer import STANDARD_AUTHORIZER
from raftka.common.sasl import SCRAM_LOGIN_MODULE, parse_jaas_config

SECURE_DIR: Final = "secure"
CLIENT_PROPERTIES: Final = "client.properties"  # read by every `raftka` command in the cluster's directory
LISTENER: Final = "SASL_SSL"  # the brokers' one client listener (and the inter-broker one)
CONTROLLER_LISTENER: Final = "CONTROLLER"
MECHANISM: Final = "SCRAM-SHA-512"  # what the nodes and the tools log in with
MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")  # every user gets both, as Kafka's docs make them
ADMIN: Final = "admin"
BROKER: Final = "broker"
HOSTS: Final = ("127.0.0.1", "localhost")
PASSWORD_BYTES: Final = 24


class SecureKitError(ClusterError):
    """A secure cluster's files are missing or unreadable."""


def jaas(user: str, password: str) -> str:
    """A ScramLoginModule entry (Kafka's sasl.jaas.config)."""
    return f'{SCRAM_LOGIN_MODULE} required username="{user}" password="{password}";'


@dataclass(frozen=True)
class SecureKit:
    """A secure cluster's CA, certificate and users (see the module docstring)."""
    root: Path
    admin_password: str = field(repr=False)
    broker_password: str = field(repr=False)

    @property
    def directory(self) -> Path:
        return self.root / SECURE_DIR

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def keystore_path(self) -> Path:
        return self.directory / "node.pem"

    @property
    def client_properties_path(self) -> Path:
        return self.root / CLIENT_PROPERTIES

    @classmethod
    def create(cls, root: Path) -> "SecureKit":
        """Make the CA, the nodes' certificate, both users' passwords and client.properties."""
        kit = cls(root, secrets.token_urlsafe(PASSWORD_BYTES), secrets.token_urlsafe(PASSWORD_BYTES))
        kit.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(kit.directory, 0o700)
        ca = CertificateAuthority.create(f"raftka local CA {root.name}")
        write_pem(kit.ca_path, ca.cert_pem)
        write_pem(kit.directory / "ca-key.pem", ca.key_pem())  # to issue more certificates by hand
        write_pem(kit.keystore_path, ca.issue("raftka node", HOSTS).keystore_pem)
        write_atomic(kit.directory / "broker.password", kit.broker_password + "\n")
        write_atomic(kit.client_properties_path, kit.client_properties_text())
        return kit

    @classmethod
    def load(cls, root: Path) -> "SecureKit":
        """The kit of an existing secure cluster; SecureKitError naming a missing file."""
        from raftka.common.server_config import parse_properties
        try:
            broker_password = (root / SECURE_DIR / "broker.password").read_text(encoding="utf-8").strip()
            properties = parse_properties((root / CLIENT_PROPERTIES).read_text(encoding="utf-8"))
        except OSError as error:
            raise SecureKitError(f"this secure cluster's {error.filename} cannot be read: "
                                 f"{error.strerror}") from None
        admin = parse_jaas_config(properties.get("sasl.jaas.config", ""), f"{CLIENT_PROPERTIES} sasl.jaas.config")
        return cls(root, admin.get("password", ""), broker_password)

    def delete(self) -> None:
        """Remove the kit's files (`cluster down --delete`)."""
        import shutil
        shutil.rmtree(self.directory, ignore_errors=True)
        self.client_properties_path.unlink(missing_ok=True)

    def add_scram(self) -> list[str]:
        """Kafka's --add-scram values of both users, every mechanism."""
        return [f"{mechanism}=[name={user},password={password}]"
                for user, password in ((ADMIN, self.admin_password), (BROKER, self.broker_password))
                for mechanism in MECHANISMS]

    def node_configs(self, roles: tuple[str, ...]) -> dict[str, Any]:
        """The security keys of a node's server.properties."""
        values: dict[str, Any] = {
            "listener.security.protocol.map": f"{CONTROLLER_LISTENER}:SASL_SSL,{LISTENER}:SASL_SSL,HTTP:PLAINTEXT",
            "ssl.keystore.location": str(self.keystore_path),
            "ssl.truststore.location": str(self.ca_path),
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": f"User:{ADMIN};User:{BROKER}",
        }
        if "broker" in roles:
            login = jaas(BROKER, self.broker_password)
            values.update({
                "inter.broker.listener.name": LISTENER,
                "sasl.mechanism.inter.broker.protocol": MECHANISM,
                "sasl.mechanism.controller.protocol": MECHANISM,
                f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config": login,
                f"listener.name.{CONTROLLER_LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config": login,
            })
        return values

    def client_properties_text(self) -> str:
        lines = ["# written by raftka cluster up --secure: the admin super user's login (keep it private)",
                 "security.protocol=SASL_SSL", f"sasl.mechanism={MECHANISM}",
                 f"sasl.jaas.config={jaas(ADMIN, self.admin_password)}",
                 f"ssl.truststore.location={self.ca_path}"]
        return "\n".join(lines) + "\n"

    def client_configs(self) -> dict[str, Any]:
        """Admin's login as a Raftka client's keywords (kafka-python's names)."""
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": MECHANISM, "sasl_plain_username": ADMIN,
                "sasl_plain_password": self.admin_password, "ssl_cafile": str(self.ca_path)}
