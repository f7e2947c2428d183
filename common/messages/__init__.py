"""Kafka's requests and responses, declared once as data with their version ranges (common/schema.py
explains the declarations, common/codec.py compiles them into encoders and decoders).

One module per family: ``data`` (Produce, Fetch, ListOffsets, Metadata, ...), ``groups`` (the
group coordinator's APIs), ``admin`` (topics and configs), ``controller`` (the broker-controller
APIs). Each declares ``REQUESTS`` and ``RESPONSES``, tuples of Messages; names, field order, types,
versions, defaults and tags follow Kafka's published message definitions, and ``valid_versions`` is
the range Raftka serves (docs/protocol.md is generated from these).
"""
