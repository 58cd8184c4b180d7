"""The only code that talks to Kafka: consumer/producer/admin adapters and the murmur2 partitioner."""

from kappaflow.clients.admin import InternalTopicManager, TopicPlan
from kappaflow.clients.kafka import KafkaRecordCollector, ProductionError, client_configs
from kappaflow.clients.murmur2 import murmur2, partition_for_key

__all__ = [
    "InternalTopicManager",
    "KafkaRecordCollector",
    "ProductionError",
    "TopicPlan",
    "client_configs",
    "murmur2",
    "partition_for_key",
]
