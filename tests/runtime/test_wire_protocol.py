"""The Kafka wire encoding behind `kappaflow transactions` (clients/wire.py, clients/txn_messages.py).

Primitives are checked against bytes written out by hand from the protocol's rules; whole requests and
responses against frames recorded from a Kafka 4.3.1 broker (the response frames without their int32
size, the request bodies after the header), so a decoder that drifts from what a broker really sends
fails here, without a broker.
"""

from __future__ import annotations

import struct

import pytest

from kappaflow.clients import txn_messages as msg
from kappaflow.clients.wire import (
    ProtocolError,
    Reader,
    VersionRange,
    Writer,
    decode_api_versions_response,
    decode_response_header,
    encode_api_versions_request,
    encode_request,
    pick_version,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16384, "808001"),
        (2**31, "8080808008"),
    ],
)
def test_unsigned_varints_are_little_endian_groups_of_seven_bits(value, encoded):
    w = Writer(flexible=True)
    w.uvarint(value)
    assert w.getvalue().hex() == encoded
    assert Reader(bytes.fromhex(encoded), flexible=True).uvarint() == value


def test_compact_strings_and_arrays_store_length_plus_one_and_zero_for_null():
    w = Writer(flexible=True)
    w.string("ab")
    w.string(None)
    w.string("")
    w.array([7, 8], lambda w2, v: w2.int32(v))
    w.array(None, lambda w2, v: w2.int32(v))
    w.tags()
    assert w.getvalue().hex() == "03616200010300000007000000080000"
    r = Reader(w.getvalue(), flexible=True)
    assert (r.string(), r.nullable_string(), r.string()) == ("ab", None, "")
    assert r.array(lambda q: q.int32()) == [7, 8]
    assert r.array(lambda q: q.int32()) == []
    r.tags()
    assert r.remaining() == 0


def test_classic_strings_and_arrays_have_fixed_width_lengths_and_minus_one_for_null():
    w = Writer(flexible=False)
    w.string("ab")
    w.string(None)
    w.array([1], lambda w2, v: w2.int16(v))
    w.tags()  # no tagged fields outside flexible versions
    assert w.getvalue().hex() == "00026162ffff000000010001"
    r = Reader(w.getvalue(), flexible=False)
    assert (r.string(), r.nullable_string(), r.array(lambda q: q.int16())) == ("ab", None, [1])


def test_unknown_tagged_fields_are_skipped():
    # two tagged fields a newer broker might add (tag 0: 3 bytes, tag 5: 1 byte), then an int16
    r = Reader(bytes.fromhex("020003aabbcc0501dd0007"), flexible=True)
    r.tags()
    assert r.int16() == 7


def test_a_truncated_response_is_a_protocol_error_not_garbage():
    with pytest.raises(ProtocolError, match="truncated"):
        Reader(bytes.fromhex("00056162"), flexible=False).string()
    with pytest.raises(ProtocolError, match="non-nullable"):
        Reader(bytes.fromhex("00"), flexible=True).string()


def test_request_header_v2_keeps_the_client_id_a_classic_string_then_adds_tags():
    frame = encode_request(61, 0, 7, "me", flexible=True, body=b"\x01")
    size = struct.unpack(">i", frame[:4])[0]
    assert size == len(frame) - 4
    assert frame[4:].hex() == "003d00000000000700026d650001"
    v1 = encode_request(10, 2, 7, "me", flexible=False, body=b"")
    assert v1[4:].hex() == "000a00020000000700026d65"


def test_api_versions_is_read_with_header_v0_and_a_flexible_body():
    assert encode_api_versions_request("kappaflow-transactions", "1").hex() == (
        "17" + b"kappaflow-transactions".hex() + "02" + b"1".hex() + "00"
    )
    # correlation 1 (no header tags: v0), no error, two APIs, throttle 0, no tagged fields
    frame = bytes.fromhex("00000001000003003d0000000000001b00010002000000000000")
    correlation, reader = decode_response_header(frame, flexible_header=False, flexible_body=True)
    assert correlation == 1
    error, versions = decode_api_versions_response(reader)
    assert error == 0 and versions == {61: VersionRange(0, 0), 27: VersionRange(1, 2)}


def test_the_version_picked_is_the_highest_both_sides_speak():
    assert pick_version("ListTransactions", VersionRange(0, 2), VersionRange(0, 1)) == 1
    assert pick_version("WriteTxnMarkers", VersionRange(1, 2), VersionRange(1, 5)) == 2
    with pytest.raises(ProtocolError, match="no common version of WriteTxnMarkers"):
        pick_version("WriteTxnMarkers", VersionRange(1, 2), VersionRange(0, 0))
    with pytest.raises(ProtocolError, match="does not support DescribeProducers"):
        pick_version("DescribeProducers", VersionRange(0, 0), None)


def _body(frame_hex: str) -> Reader:
    """The body of a recorded flexible response frame (header v1: correlation id and tags)."""
    _correlation, reader = decode_response_header(bytes.fromhex(frame_hex), True, True)
    return reader


def test_describe_producers_request_and_a_recorded_response():
    assert msg.encode_describe_producers({"tx-a": [0]}).hex() == "020574782d6102000000000000"
    frame = (
        "00000002000000000002"
        "0574782d61"
        "02"
        "00000000"
        "0000"
        "00"
        "02"
        "0000000000000001"
        "00000000"
        "00000002"
        "000001a21aaa9ccc"
        "00000000"
        "ffffffffffffffff"
        "00"
        "00"
        "00"
        "00"
    )
    (found,) = msg.decode_describe_producers(_body(frame))
    assert (found.topic, found.partition, found.error_code, found.error_message) == ("tx-a", 0, 0, None)
    assert found.producers == (
        msg.ProducerState(producer_id=1, producer_epoch=0, last_sequence=2, last_timestamp=1795743718604,
                          coordinator_epoch=0, current_txn_start_offset=-1),
    )  # fmt: skip


def test_list_transactions_by_version_and_a_recorded_response():
    assert msg.encode_list_transactions(2, [], []).hex() == "0101ffffffffffffffff0000"
    assert msg.encode_list_transactions(1, ["Ongoing"], [5], 60000).hex() == (
        "02084f6e676f696e67020000000000000005000000000000ea6000"
    )
    assert msg.encode_list_transactions(0, [], []).hex() == "010100"
    frame = "00000003000000000000000102096d616e75616c2d310000000000000001084f6e676f696e670000"
    listing = msg.decode_list_transactions(_body(frame))
    assert listing == msg.TransactionListing(0, (), (msg.ListedTransaction("manual-1", 1, "Ongoing"),))


def test_find_coordinator_for_a_transactional_id_in_batched_and_single_versions():
    assert msg.encode_find_coordinator(6, "manual-1").hex() == "0102096d616e75616c2d3100"
    assert msg.encode_find_coordinator(3, "manual-1").hex() == "096d616e75616c2d310100"
    frame = "00000004000000000002096d616e75616c2d31000000010a3132372e302e302e31000099180000010000"
    assert msg.decode_find_coordinator(6, _body(frame), "manual-1") == [
        msg.Coordinator("manual-1", 1, "127.0.0.1", 39192, 0, "")
    ]
    v3 = Writer(flexible=True)
    for write in (lambda: v3.int32(0), lambda: v3.int16(15), lambda: v3.string("loading"),
                  lambda: v3.int32(-1), lambda: v3.string(""), lambda: v3.int32(-1), v3.tags):  # fmt: skip
        write()
    (single,) = msg.decode_find_coordinator(3, Reader(v3.getvalue(), flexible=True), "t")
    assert (single.key, single.error_code, single.error_message) == ("t", 15, "loading")


def test_describe_transactions_request_and_a_recorded_response():
    assert msg.encode_describe_transactions(["manual-1"]).hex() == "02096d616e75616c2d3100"
    frame = (
        "00000005"
        "00"
        "00000000"
        "02"
        "0000"
        "096d616e75616c2d31"
        "084f6e676f696e67"
        "000927c0"
        "000001a21aaa533d"
        "0000000000000001"
        "0000"
        "02"
        "0574782d61"
        "02"
        "00000000"
        "00"
        "00"
        "00"
    )
    (described,) = msg.decode_describe_transactions(_body(frame))
    assert described == msg.TransactionDescription(
        error_code=0, transactional_id="manual-1", state="Ongoing", timeout_ms=600000,
        start_time_ms=1795743699773, producer_id=1, producer_epoch=0, partitions=frozenset({("tx-a", 0)}),
    )  # fmt: skip


def test_write_txn_markers_writes_one_abort_marker_with_the_transaction_version_from_v2():
    spec = msg.AbortSpec("tx-a", 0, producer_id=1, producer_epoch=3, coordinator_epoch=7)
    common = "020000000000000001000300020574782d6102000000000000000007"
    assert msg.encode_write_txn_markers(1, spec).hex() == common + "0000"
    assert msg.encode_write_txn_markers(2, spec).hex() == common + "000000"  # version 0, tags, tags
    # markers [producer 1: topics [tx-a: partitions [0: INVALID_PRODUCER_EPOCH]]]
    response = bytes.fromhex("020000000000000001020574782d610200000000002f00000000")
    assert msg.decode_write_txn_markers(Reader(response, flexible=True)) == [
        msg.MarkerResult(producer_id=1, topic="tx-a", partition=0, error_code=47)
    ]


def test_only_find_coordinator_and_leave_group_have_classic_versions_among_the_apis_sent():
    assert not msg.is_flexible(msg.FIND_COORDINATOR, 2)
    assert msg.is_flexible(msg.FIND_COORDINATOR, 3)
    assert not msg.is_flexible(msg.LEAVE_GROUP, 3)
    assert msg.is_flexible(msg.LEAVE_GROUP, 4)
    classic = (msg.FIND_COORDINATOR, msg.LEAVE_GROUP)
    assert all(msg.is_flexible(api, versions.min_version) for api, versions in msg.SUPPORTED.items()
               if api not in classic)  # fmt: skip


def test_find_coordinator_for_a_group_sends_key_type_zero():
    assert msg.encode_find_coordinator(6, "app", msg.KEY_TYPE_GROUP).hex() == "000204617070" + "00"
    assert msg.encode_find_coordinator(3, "app", msg.KEY_TYPE_GROUP).hex() == "04617070" + "00" + "00"
