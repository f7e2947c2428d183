"""The asyncio client: the same API as ``client`` with coroutines; the blocking classes wrap it.

    producer = client.aio.Producer(bootstrap_servers="127.0.0.1:9092")
    future = await producer.send("events", b"value", key=b"key")
    metadata = await future
"""
from raftka.client.aio.admin import AdminClient
from raftka.client.aio.consumer import Consumer
from raftka.client.aio.producer import Producer

# aiokafka's names, with its methods (start/stop, send_and_wait, getone/getmany, async with/for).
AIOKafkaProducer = Producer
AIOKafkaConsumer = Consumer
AIOKafkaAdminClient = AdminClient

__all__ = ["Producer", "Consumer", "AdminClient", "AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"]
