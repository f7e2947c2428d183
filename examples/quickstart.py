"""Raftka client quickstart: create a topic, produce keyed records, read them back.

    RAFTKA_BOOTSTRAP=127.0.0.1:9092 python docs/examples/quickstart.py
"""
import os
import uuid

from raftka.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition

bootstrap = os.environ.get("RAFTKA_BOOTSTRAP", "localhost:9092")
topic = f"quickstart-{uuid.uuid4().hex[:6]}"

with AdminClient(bootstrap_servers=bootstrap) as admin:
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])

with Producer(bootstrap_servers=bootstrap, compression_type="lz4") as producer:
    for i in range(30):
        producer.send(topic, f"event {i}".encode(), key=f"user-{i % 5}".encode())
    failed = producer.flush(timeout=30)
    assert not failed, failed

with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
              consumer_timeout_ms=1000) as consumer:
    partitions = [TopicPartition(topic, p) for p in range(3)]
    consumer.assign(partitions)
    records = list(consumer)
    print(f"read {len(records)} records; end offsets {consumer.end_offsets(partitions)}")

# Records with one key share a partition, in the order they were sent.
by_key: dict = {}
for r in records:
    by_key.setdefault(r.key, set()).add(r.partition)
assert len(records) == 30 and all(len(parts) == 1 for parts in by_key.values())
print("quickstart OK")
