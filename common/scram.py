"""SCRAM credentials (RFC 5802, with SHA-256 and SHA-512 per RFC 7677), as Kafka keeps them.

A broker never stores or sees a password: only the salt, the iteration count and two keys derived
from the salted password,

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey      = HMAC(SaltedPassword, "Server Key")

StoredKey checks a client's proof; ServerKey signs the server's final message, so the client
knows the server holds the credential too. AlterUserScramCredentials carries the salted password,
never the password itself (the admin client derives it); the controllers turn it into a
:class:`ScramCredential` before anything is written to the metadata log.

Mechanism names and numbers are Kafka's (ScramMechanism: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512),
and so are the iteration bounds: at least 4,096, at most 16,384.
"""
from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final, NamedTuple


class ScramMechanism(NamedTuple):
    """A SCRAM mechanism: its SASL name, Kafka's number for it, its hash."""
    name: str
    number: int
    hash_name: str

    @property
    def digest_bytes(self) -> int:
        return hashlib.new(self.hash_name).digest_size


SCRAM_SHA_256: Final = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512: Final = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: Final[dict[str, ScramMechanism]] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_NUMBER: Final[dict[int, ScramMechanism]] = {m.number: m for m in MECHANISMS.values()}
ITERATIONS_MIN: Final = 4096
ITERATIONS_MAX: Final = 16384
DEFAULT_ITERATIONS: Final = 8192
SALT_BYTES: Final = 32  # a fresh random salt per credential
SALT_BYTES_MAX: Final = 1024  # a salt a request may carry (bounds what the metadata log stores)
USER_NAME_BYTES_MAX: Final = 1024


class ScramError(ValueError):
    """A mechanism, iteration count, salt or user name SCRAM cannot take; the message says which."""


@dataclass(frozen=True)
class ScramCredential:
    """What a broker keeps for one user and mechanism (never the password)."""
    mechanism: ScramMechanism
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys stay out of logs and tracebacks
        return f"ScramCredential({self.mechanism.name}, iterations={self.iterations})"


def mechanism(name_or_number: str | int) -> ScramMechanism:
    """The mechanism by SASL name (``SCRAM-SHA-256``) or Kafka's number; ScramError otherwise."""
    found = (MECHANISMS_BY_NUMBER.get(name_or_number) if isinstance(name_or_number, int)
             else MECHANISMS.get(str(name_or_number).upper()))
    if found is None:
        raise ScramError(f"unknown SCRAM mechanism {name_or_number!r}: use SCRAM-SHA-256 or SCRAM-SHA-512")
    return found


def check_iterations(iterations: int) -> int:
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise ScramError(f"iterations {iterations} outside [{ITERATIONS_MIN}, {ITERATIONS_MAX}]")
    return iterations


def hmac_digest(mech: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mech.hash_name).digest()


def hash_digest(mech: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mech.hash_name, data).digest()


def salted_password(mech: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """PBKDF2-HMAC of the password's UTF-8 bytes (RFC 5802's Hi())."""
    check_iterations(iterations)
    return hashlib.pbkdf2_hmac(mech.hash_name, password.encode("utf-8"), salt, iterations)


def client_key(mech: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mech, salted, b"Client Key")


def server_key(mech: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mech, salted, b"Server Key")


def stored_key(mech: ScramMechanism, key_of_client: bytes) -> bytes:
    return hash_digest(mech, key_of_client)


def credential_from_salted(mech: ScramMechanism, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The credential a broker keeps, from the salted password AlterUserScramCredentials carries."""
    check_iterations(iterations)
    if not 0 < len(salt) <= SALT_BYTES_MAX:
        raise ScramError(f"a salt of {len(salt)} bytes: it must have 1 to {SALT_BYTES_MAX}")
    if len(salted) != mech.digest_bytes:
        raise ScramError(f"a salted password of {len(salted)} bytes: {mech.name} makes {mech.digest_bytes}")
    return ScramCredential(mech, bytes(salt), stored_key(mech, client_key(mech, salted)),
                           server_key(mech, salted), iterations)


def new_credential(mech: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
    """A credential for ``password`` with a fresh random salt (or ``salt``)."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    return credential_from_salted(mech, salt, salted_password(mech, password, salt, iterations), iterations)


def check_user_name(name: str) -> str:
    """A SCRAM user name: non-empty, at most USER_NAME_BYTES_MAX bytes of UTF-8, no control
    characters (it lands in logs and the metadata log)."""
    if not name or len(name.encode("utf-8")) > USER_NAME_BYTES_MAX:
        raise ScramError(f"a user name must have 1 to {USER_NAME_BYTES_MAX} bytes")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise ScramError("a user name may not hold control characters")
    return name
