"""Raftka's Python client, shaped like kafka-python.

    from client import Producer, Consumer, AdminClient, NewTopic, TopicPartition

``client.aio`` has the asyncio flavour the blocking classes wrap. ``client.protocol`` holds the
wire code (frames, record batches, the error table) shared with the servers.
"""
from client.admin import AdminClient
from client.aio.group import CommitFailedError, ConsumerRebalanceListener
from client.assignors import (CooperativeStickyAssignor, RangePartitionAssignor, RoundRobinPartitionAssignor,
                              StickyAssignor)
from client.consumer import Consumer
from client.errors import (IllegalStateError, KafkaClosedError, KafkaTimeoutError,
                           NoOffsetForPartitionError, RaftkaError, SerializationError)
from client.futures import FutureRecordMetadata
from client.partitioner import DefaultPartitioner, murmur2
from client.producer import Producer
from client.structs import (BrokerMetadata, ConfigEntry, ConfigResource, ConsumerRecord, NewTopic,
                            OffsetAndMetadata, OffsetAndTimestamp, RecordMetadata, TopicPartition)

# kafka-python's names, so its examples run with only the import line changed.
KafkaProducer = Producer
KafkaConsumer = Consumer
KafkaAdminClient = AdminClient

__all__ = ["Producer", "Consumer", "AdminClient", "KafkaProducer", "KafkaConsumer",
           "KafkaAdminClient", "NewTopic", "TopicPartition", "RecordMetadata", "ConsumerRecord",
           "OffsetAndTimestamp", "BrokerMetadata", "ConfigResource", "ConfigEntry",
           "FutureRecordMetadata", "DefaultPartitioner", "murmur2", "RaftkaError",
           "KafkaTimeoutError", "NoOffsetForPartitionError", "IllegalStateError",
           "KafkaClosedError", "SerializationError",
           # consumer groups
           "ConsumerRebalanceListener", "OffsetAndMetadata", "CommitFailedError", "RangePartitionAssignor",
           "RoundRobinPartitionAssignor", "StickyAssignor", "CooperativeStickyAssignor"]
