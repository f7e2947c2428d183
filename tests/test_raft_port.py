"""The Raft port of a default local cluster (#hardening): it listens on loopback only, it needs
the cluster's secret, and a pickle sent to it runs no code; the cluster's files are its owner's.

The same pickle without a secret ran code in a controller (shared/NOTES.md, security facts):
that is what this port used to accept from anyone who could reach it."""
from __future__ import annotations

import pickle
import socket
import stat
import struct
import time
import zlib
from pathlib import Path

import pytest

PROC_NET_TCP = Path("/proc/net/tcp")


def listening_addresses(port: int) -> list[str]:
    """The local IPv4 addresses (as hex, /proc/net/tcp's form) listening on ``port``."""
    found = []
    for line in PROC_NET_TCP.read_text().splitlines()[1:]:
        fields = line.split()
        address, _, hex_port = fields[1].partition(":")
        if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
            found.append(address)
    return found


def frame(payload: bytes) -> bytes:
    return struct.pack("i", len(payload)) + payload  # pysyncobj: native int32 length, then the data


@pytest.fixture
def cluster(cluster_factory):
    return cluster_factory(voters=1)


def test_the_clusters_files_are_its_owners_and_the_secret_is_in_its_own_file(cluster):
    spec = cluster.nodes[1]
    for path in (cluster.secret_path, cluster.state_path, spec.config_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    secret = cluster.secret_path.read_text().strip()
    assert len(secret) >= 32
    assert secret not in spec.config_path.read_text() and secret not in cluster.state_path.read_text()


@pytest.mark.skipif(not PROC_NET_TCP.exists(), reason="reads the listening sockets from /proc/net/tcp")
def test_the_raft_port_listens_on_loopback_only(cluster):
    assert listening_addresses(cluster.nodes[1].raft_port) == ["0100007F"]  # 127.0.0.1, not 0.0.0.0


def test_a_pickle_or_a_wrong_secret_on_the_raft_port_runs_nothing_and_is_logged_once(cluster, tmp_path):
    from pysyncobj.encryptor import getEncryptor
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    forged = zlib.compress(pickle.dumps(Exploit()))
    wrong_secret = getEncryptor("not-the-cluster-secret").encrypt(forged)
    port = cluster.nodes[1].raft_port
    for payload in [forged, wrong_secret, forged, b"garbage" * 10]:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(frame(payload))
            time.sleep(0.3)
    assert not marker.exists()  # no code ran
    log = cluster.nodes[1].log_path.read_text()
    lines = [line for line in log.splitlines() if "dropped a connection to the Raft port" in line]
    assert len(lines) == 1, lines  # four bad peers, one line (rate-limited per cause)
    assert cluster.describe_quorum(1)["leader_id"] == 1  # and the controller still serves
