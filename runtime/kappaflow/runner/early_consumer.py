"""The stream thread's first group consumer, created and connected while the thread prepares its topics.

A new librdkafka client makes its first broker connection when it is first asked for something: a fresh
consumer's first metadata request took ~55 ms on a local broker, and a fresh consumer's subscribe took
0.06-0.07 s to its assignment against 0.007-0.011 s for a consumer that had already looked a topic up
(bench measurements, 2026-11-27, `group.initial.rebalance.delay.ms=0`). That first connection used to sit
between `subscribe` and the assignment, after the internal topics were prepared (~0.06 s, itself mostly
the admin client's first connection). Created first, with a metadata request on a thread of its own, the
consumer connects while the topics are prepared, and `subscribe` starts from a connected client.

Only the connection is early: the consumer subscribes, and so joins the group, exactly where it did.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from confluent_kafka import Consumer, KafkaException

from kappaflow.clients.kafka import new_consumer

log = logging.getLogger(__name__)

# Bound on the early metadata request: past it the consumer connects when it subscribes, as it would have.
CONNECT_TIMEOUT_S = 5.0


class EarlyConsumer:
    """A group consumer whose first broker connection is made on a thread (`take` hands it over)."""

    def __init__(self, settings: dict[str, Any], topic: str | None) -> None:
        """`topic`: a topic the consumer will subscribe to, looked up to connect (None: the metadata of
        every topic, only for a topology with no source topic)."""
        self._consumer: Consumer | None = new_consumer(settings)
        self._thread = threading.Thread(
            target=self._connect, args=(self._consumer, topic), name="kappaflow-consumer-connect", daemon=True
        )
        self._thread.start()

    @staticmethod
    def _connect(consumer: Consumer, topic: str | None) -> None:
        try:
            consumer.list_topics(topic, timeout=CONNECT_TIMEOUT_S)
        except KafkaException as exc:  # a head start only: subscribing connects by itself
            log.debug("early consumer connection: %s", exc)

    def take(self) -> Consumer:
        """The consumer, once its metadata request has returned (no call may overlap `close` later)."""
        self._thread.join()
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            raise RuntimeError("the early consumer was already taken or closed")
        return consumer

    def close(self) -> None:
        """Close a consumer that was never taken (the thread stopped before joining the group)."""
        self._thread.join()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()
