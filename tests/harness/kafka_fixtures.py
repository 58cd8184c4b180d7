"""Pytest fixtures for the local Kafka broker (filled in by the Kafka harness)."""
