"""Cluster metadata: typed records, the immutable MetadataImage and the MetadataDelta that
replays records into the next image (Kafka's metadata/image package). See docs/controller.md."""
