"""SCRAM credentials (common/scram.py): what a broker keeps, derived as RFC 5802 says."""
import base64
import hashlib
import hmac

import pytest

from raftka.common import scram


def test_a_credential_holds_rfc_5802s_keys_and_never_the_password():
    mech = scram.SCRAM_SHA_256
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")  # RFC 7677's example
    credential = scram.new_credential(mech, "pencil", 4096, salt)
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert credential.stored_key == hashlib.sha256(client_key).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha256").digest()
    assert (credential.salt, credential.iterations) == (salt, 4096)
    assert "pencil" not in repr(credential) and credential.stored_key.hex() not in repr(credential)
    assert scram.credential_from_salted(mech, salt, salted, 4096) == credential


def test_mechanisms_by_kafkas_names_and_numbers():
    assert scram.mechanism("SCRAM-SHA-512") is scram.SCRAM_SHA_512
    assert scram.mechanism(1) is scram.SCRAM_SHA_256
    assert scram.SCRAM_SHA_512.digest_bytes == 64
    with pytest.raises(scram.ScramError, match="unknown SCRAM mechanism"):
        scram.mechanism("SCRAM-MD5")


@pytest.mark.parametrize("iterations", [0, 4095, 16385])
def test_iterations_outside_kafkas_bounds_are_refused(iterations):
    with pytest.raises(scram.ScramError, match="iterations"):
        scram.new_credential(scram.SCRAM_SHA_256, "pw", iterations)


def test_a_salted_password_of_the_wrong_size_or_an_empty_salt_is_refused():
    with pytest.raises(scram.ScramError, match="salted password of 32 bytes"):
        scram.credential_from_salted(scram.SCRAM_SHA_512, b"salt", bytes(32), 4096)
    with pytest.raises(scram.ScramError, match="salt of 0 bytes"):
        scram.credential_from_salted(scram.SCRAM_SHA_256, b"", bytes(32), 4096)


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 1025])
def test_user_names_that_would_mislead_a_log_are_refused(name):
    with pytest.raises(scram.ScramError):
        scram.check_user_name(name)
