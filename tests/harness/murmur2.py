"""Kafka's murmur2 hash and default partition choice, in pure Python, for tests.

Why it exists: kappaflow relies on every producer using librdkafka's ``murmur2_random`` partitioner, which
must place a keyed record in exactly the partition the Java client's default partitioner would pick
(``Utils.toPositive(Utils.murmur2(key)) % numPartitions``). Tests compute the expected partition with this
independent implementation and compare it with where the real broker stored the record; Spark shuffles
must use the same function. The arithmetic emulates Java's 32-bit signed ``int`` overflow explicitly.
"""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def _to_signed32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def murmur2(data: bytes) -> int:
    """Return Java ``org.apache.kafka.common.utils.Utils.murmur2(data)``: a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return _to_signed32(h)


def to_positive(number: int) -> int:
    """Java ``Utils.toPositive``: clear the sign bit (unlike ``abs``, defined for ``Integer.MIN_VALUE``)."""
    return number & 0x7FFFFFFF


def default_partition(key: bytes, num_partitions: int) -> int:
    """The partition the Java default partitioner (and librdkafka ``murmur2_random``) picks for ``key``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
