"""Raftka's Python client, shaped like kafka-python.

    from raftka.client import Producer, Consumer, AdminClient, NewTopic, TopicPartition

``client.aio`` has the asyncio flavour the blocking classes wrap. ``raftka.common`` holds the
wire code (frames, record batches, the error table) shared with the servers.
"""
from raftka.client.acl import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                               ResourcePattern, ResourcePatternFilter, ResourceType)
from raftka.client.admin import (AdminClient, ElectionType, PartitionReassignment, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                 UserScramCredentialsDescription, UserScramCredentialUpsertion)
from raftka.client.aio.group import CommitFailedError, ConsumerRebalanceListener
from raftka.client.assignors import (CooperativeStickyAssignor, RangePartitionAssignor, RoundRobinPartitionAssignor,
                              StickyAssignor)
from raftka.client.consumer import Consumer
from raftka.client.errors import (IllegalArgumentError, IllegalStateError, KafkaClosedError, KafkaError,
                           KafkaTimeoutError, NoBrokersAvailable, NoOffsetForPartitionError, RaftkaError,
                           SerializationError)
from raftka.client.futures import FutureRecordMetadata
from raftka.client.partitioner import DefaultPartitioner, murmur2
from raftka.client.producer import Producer
from raftka.client.structs import (AlterConfigOp, AlterConfigOpType, BrokerMetadata, ConfigEntry, ConfigResource,
                            ConfigResourceType,
                            ConsumerRecord, NewPartitions, NewTopic, OffsetAndMetadata, OffsetAndTimestamp,
                            RecordMetadata, TopicPartition)

# kafka-python's names, so its examples run with only the import line changed.
KafkaProducer = Producer
KafkaConsumer = Consumer
KafkaAdminClient = AdminClient

__all__ = ["Producer", "Consumer", "AdminClient", "KafkaProducer", "KafkaConsumer",
           "KafkaAdminClient", "NewTopic", "NewPartitions", "TopicPartition", "RecordMetadata", "ConsumerRecord",
           "OffsetAndTimestamp", "BrokerMetadata", "ConfigResource", "ConfigResourceType", "ConfigEntry",
           "AlterConfigOp", "AlterConfigOpType",
           # SCRAM credentials (confluent-kafka's names)
           "ElectionType", "PartitionReassignment", "ScramMechanism", "ScramCredentialInfo", "UserScramCredentialUpsertion", "UserScramCredentialDeletion",
           "UserScramCredentialsDescription",
           # ACLs (kafka-python's names)
           "ACL", "ACLFilter", "ACLOperation", "ACLPermissionType", "ACLResourcePatternType", "ResourcePattern",
           "ResourcePatternFilter", "ResourceType", "IllegalArgumentError",
           "FutureRecordMetadata", "DefaultPartitioner", "murmur2", "RaftkaError",
           "KafkaTimeoutError", "NoBrokersAvailable", "KafkaError", "NoOffsetForPartitionError", "IllegalStateError",
           "KafkaClosedError", "SerializationError",
           # consumer groups
           "ConsumerRebalanceListener", "OffsetAndMetadata", "CommitFailedError", "RangePartitionAssignor",
           "RoundRobinPartitionAssignor", "StickyAssignor", "CooperativeStickyAssignor"]
