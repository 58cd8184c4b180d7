"""kappaflow: Kafka Streams for Python."""
