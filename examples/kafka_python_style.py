"""kafka-python's usual producer and consumer examples, run against Raftka.

Only the import lines differ from kafka-python (``from kafka import ...`` becomes
``from raftka.client import ...``, ``kafka.errors`` becomes ``raftka.client.errors``). Run it against a
cluster (tests/test_client_examples.py does):

    RAFTKA_BOOTSTRAP=127.0.0.1:9092 python docs/examples/kafka_python_style.py

The topics (my-topic, json-topic) must exist; this script prints what it produced and consumed
and exits 0 when everything it sent came back.
"""
import json
import logging
import os
import sys

from raftka.client import KafkaConsumer, KafkaProducer      # was: from kafka import ...
from raftka.client.errors import KafkaError                  # was: from kafka.errors import KafkaError

log = logging.getLogger("example")
BOOTSTRAP = os.environ.get("RAFTKA_BOOTSTRAP", "localhost:9092").split(",")

# --- producer -----------------------------------------------------------------------------
producer = KafkaProducer(bootstrap_servers=BOOTSTRAP)

# Asynchronous by default
future = producer.send('my-topic', b'raw_bytes')

# Block for 'synchronous' sends
try:
    record_metadata = future.get(timeout=10)
except KafkaError:
    log.exception("send failed")
    sys.exit(1)

# A successful result gives the assigned topic, partition and offset
print(record_metadata.topic, record_metadata.partition, record_metadata.offset)

# Keyed messages are partitioned by the key's hash
producer.send('my-topic', key=b'foo', value=b'bar')

# Produce asynchronously, with callbacks
sent = []


def on_send_success(record_metadata):
    sent.append((record_metadata.topic, record_metadata.partition, record_metadata.offset))


def on_send_error(excp):
    log.error('I am an errback', exc_info=excp)


for _ in range(100):
    producer.send('my-topic', b'msg').add_callback(on_send_success).add_errback(on_send_error)

# Block until all asynchronous messages are sent
producer.flush()
producer.close()

# JSON messages, keyed
json_producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, retries=5,
                              key_serializer=str.encode,
                              value_serializer=lambda m: json.dumps(m).encode('ascii'))
for i in range(10):
    json_producer.send('json-topic', key='user-%d' % (i % 3), value={'n': i}).get(timeout=10)
json_producer.flush()
json_producer.close()

# --- consumer -----------------------------------------------------------------------------
# Earliest available messages, JSON values, StopIteration after 1 s without a message.
consumer = KafkaConsumer('json-topic',
                         group_id='my-group',
                         bootstrap_servers=BOOTSTRAP,
                         auto_offset_reset='earliest',
                         enable_auto_commit=False,
                         value_deserializer=lambda m: json.loads(m.decode('ascii')),
                         consumer_timeout_ms=1000)
values = []
for message in consumer:
    print("%s:%d:%d: key=%s value=%s" % (message.topic, message.partition, message.offset,
                                         message.key, message.value))
    values.append(message.value['n'])
consumer.close()

raw = KafkaConsumer('my-topic', bootstrap_servers=BOOTSTRAP, auto_offset_reset='earliest',
                    consumer_timeout_ms=1000)
raw_count = sum(1 for _ in raw)
raw.close()

ok = sorted(values) == list(range(10)) and len(sent) == 100 and raw_count == 102
print("sent", len(sent), "callbacks; consumed", raw_count, "raw and", len(values), "json records:",
      "OK" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
