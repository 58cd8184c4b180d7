"""The Kafka client adapters: client settings per role, the record collector, the admin client for
internal topics, and the murmur2 partitioner.

Not the only code that imports confluent_kafka: the runner drives its consumer and producer directly
(group membership, rebalances, transactions), Spark's Kafka I/O and the schema-registry serdes use it
too. Where it may be imported is the import contract "confluent_kafka only in ..." in pyproject.toml;
the layers below the runner (tasks, state, dsl, topology) never import it."""

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
