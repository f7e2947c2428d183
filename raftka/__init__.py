"""Raftka's import namespace: every package installs under it (raftka.client, raftka.broker, ...).

This folder holds the rooms above the servers: the command line (`raftka.cli`, a module per
subcommand in `raftka/cli/commands/`), the local-cluster kit (`raftka.cluster`) and the
benchmarks (`raftka.bench`). It imports nothing, so `import raftka.client` loads the client only.
"""
__version__ = "0.1.0"
