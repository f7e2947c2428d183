"""Example pipelines on the `raftka` data source (``worldcup_stats``: the quickstart's demo)."""
