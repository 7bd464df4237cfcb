"""Correction 2 of streams/faust_compat.py is needed: aiokafka does not seek back to a committed offset of 0.

If this fails after an upgrade of aiokafka, `rewind_from_zero` may no longer be needed: check, and remove it.
"""
import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from gpufleet.streams.kafka import produce

pytestmark = pytest.mark.integration


def test_aiokafka_skips_the_seek_to_a_committed_offset_of_zero(kafka_bootstrap, topic):
    name = topic(partitions=1)
    produce(kafka_bootstrap, name, [("k", b"x")] * 3)
    tp = TopicPartition(name, 0)

    async def scenario():
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=f"compat-{uuid.uuid4().hex[:8]}",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.commit({tp: OffsetAndMetadata(0, "")})
            await consumer.seek_to_end(tp)
            at_end = await consumer.position(tp)
            await consumer.seek_to_committed(tp)
            return at_end, await consumer.position(tp)
        finally:
            await consumer.stop()

    at_end, after = asyncio.run(scenario())
    assert at_end == 3
    assert after == 3, "aiokafka now seeks to a committed offset of 0: rewind_from_zero may go"
