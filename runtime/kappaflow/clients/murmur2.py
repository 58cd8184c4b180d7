"""Kafka's murmur2 partition function, so the runtime can check where librdkafka will put a key.

Every producer is configured with librdkafka's `murmur2_random` partitioner, which matches the Java
client's default partitioner for keyed records. The runtime computes the same function when a sink needs
to know a partition up front (stream partitioners, co-partitioning checks, key -> task lookups for
interactive queries) without asking the producer. 32-bit arithmetic is emulated with masks.
"""

from __future__ import annotations

_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_MULT = 0x5BD1E995


def murmur2(data: bytes) -> int:
    """Java's `Utils.murmur2(data)` as a signed 32-bit int."""
    n = len(data)
    h = (_SEED ^ n) & _MASK
    end = n & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _MULT) & _MASK
        k ^= k >> 24
        k = (k * _MULT) & _MASK
        h = ((h * _MULT) & _MASK) ^ k
    rest = n - end
    if rest:
        if rest == 3:
            h ^= data[end + 2] << 16
        if rest >= 2:
            h ^= data[end + 1] << 8
        h ^= data[end]
        h = (h * _MULT) & _MASK
    h ^= h >> 13
    h = (h * _MULT) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner (and `murmur2_random`) chooses for a non-null key."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
