"""The `raftka` command and the local-cluster API: the layer above every other package.

`raftka.cli` dispatches subcommands (server, quorum, perf, ...); each lives in
`raftka/commands/<name>.py`. Nothing below this package imports it.
"""
__version__ = "0.1.0"
