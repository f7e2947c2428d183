"""The asyncio client: the same API as ``client`` with coroutines; the blocking classes wrap it.

    producer = client.aio.Producer(bootstrap_servers="127.0.0.1:9092")
    future = await producer.send("events", b"value", key=b"key")
    metadata = await future
"""
from raftka.client.aio.admin import AdminClient
from raftka.client.aio.consumer import Consumer
from raftka.client.aio.producer import Producer

__all__ = ["Producer", "Consumer", "AdminClient"]
