"""`kappaflow transactions list | describe | describe-producers | find-hanging | abort` (KIP-664).

When a read_committed reader stands still behind a transaction nobody will end (kappaflow's warning "a
transaction open there is hanging", docs/operations.md), the fix is to find the producer holding the
partition and write an abort marker for it. Kafka ships that as kafka-transactions.sh, which needs a JVM
and the Kafka distribution, and confluent-kafka's AdminClient offers none of the requests it uses; so
these commands speak them directly (clients/wire.py, clients/txn_messages.py), with the rules in
clients/hanging_transactions.py. The connection settings are read as `kappaflow topics` reads them.
Every command prints a table, or JSON with `--json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from kappaflow.clients.hanging_transactions import (
    TransactionsError,
    abort_spec_at_offset,
    explicit_abort_spec,
    hanging_transactions,
    open_transactions,
)
from kappaflow.clients.txn_admin import TransactionsAdmin
from kappaflow.clients.txn_messages import AbortSpec


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell, like kafka-transactions.sh prints them."""
    cells = [list(headers), *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def _emit(args: argparse.Namespace, out: TextIO, headers: Sequence[str], rows: list[list[Any]]) -> None:
    if args.json:
        print(json.dumps([dict(zip(headers, row, strict=True)) for row in rows], indent=2), file=out)
    else:
        print(table(headers, rows), file=out)


def _admin(args: argparse.Namespace) -> TransactionsAdmin:
    """The admin on the cluster the connection options name (`client_settings`: add_commands)."""
    return TransactionsAdmin(args.client_settings(args), args.timeout)


def list_command(args: argparse.Namespace, out: TextIO) -> int:
    admin = _admin(args)
    try:
        listed = admin.list_transactions(args.state, args.producer_id)
    finally:
        admin.close()
    headers = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    _emit(args, out, headers, [[t.transactional_id, node, t.producer_id, t.state] for node, t in listed])
    return 0


def describe_command(args: argparse.Namespace, out: TextIO) -> int:
    admin = _admin(args)
    try:
        description = admin.describe_transactions([args.transactional_id])[args.transactional_id]
    finally:
        admin.close()
    if description is None:
        raise TransactionsError(
            f"--transactional-id: the coordinator does not know '{args.transactional_id}'"
        )
    now_ms = int(time.time() * 1000)
    started = description.start_time_ms
    headers = ["TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs",
               "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"]  # fmt: skip
    partitions = ",".join(f"{t}-{p}" for t, p in sorted(description.partitions))
    row = [description.transactional_id, description.producer_id, description.producer_epoch,
           description.state, description.timeout_ms, started if started >= 0 else None,
           now_ms - started if started >= 0 else None, partitions]  # fmt: skip
    _emit(args, out, headers, [row])
    return 0


PRODUCER_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset"]  # fmt: skip


def describe_producers_command(args: argparse.Namespace, out: TextIO) -> int:
    admin = _admin(args)
    try:
        (found,) = admin.describe_producers([(args.topic, args.partition)])
    finally:
        admin.close()
    rows = [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
             p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None]
            for p in sorted(found.producers, key=lambda p: p.producer_id)]  # fmt: skip
    _emit(args, out, PRODUCER_HEADERS, rows)
    return 0


def find_hanging_command(args: argparse.Namespace, out: TextIO) -> int:
    if args.partition is not None and len(args.topic or []) != 1:
        raise TransactionsError("--partition needs exactly one --topic")
    if args.max_transaction_timeout_minutes < 0:
        raise TransactionsError(f"--max-transaction-timeout-minutes: expected 0 or more, got "
                                f"{args.max_transaction_timeout_minutes}")  # fmt: skip
    admin = _admin(args)
    try:
        partitions = admin.partitions(args.topic)
        if args.partition is not None:
            admin.leader(args.topic[0], args.partition)  # an unknown partition is named as such
            partitions = [(args.topic[0], args.partition)]
        now_ms = int(time.time() * 1000)
        older_than_ms = int(args.max_transaction_timeout_minutes * 60_000)
        candidates = open_transactions(admin.describe_producers(partitions), now_ms, older_than_ms)
        producer_ids = sorted({c.producer.producer_id for c in candidates})
        listed = admin.list_transactions(producer_ids=producer_ids) if producer_ids else []
        ids = {t.producer_id: t.transactional_id for _node, t in listed}
        descriptions = admin.describe_transactions(ids.values())
    finally:
        admin.close()
    hanging = hanging_transactions(candidates, ids, descriptions, now_ms)
    headers = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
               "LastTimestamp", "Duration(min)", "TransactionalId", "Reason"]  # fmt: skip
    rows = [[h.open.topic, h.open.partition, h.open.producer.producer_id, h.open.producer.producer_epoch,
             h.open.producer.coordinator_epoch, h.open.producer.current_txn_start_offset,
             h.open.producer.last_timestamp, h.open.age_ms(now_ms) // 60_000, h.transactional_id, h.reason]
            for h in hanging]  # fmt: skip
    _emit(args, out, headers, rows)
    if not args.json:
        print(
            f"{len(rows)} hanging transaction(s) among {len(candidates)} open longer than "
            f"{args.max_transaction_timeout_minutes} min on {len(partitions)} partition(s)",
            file=sys.stderr,
        )
    return 0


def abort_command(args: argparse.Namespace, out: TextIO) -> int:
    explicit = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is None and any(v is None for v in explicit):
        missing = [f for f, v in zip(("--producer-id", "--producer-epoch", "--coordinator-epoch"), explicit,
                                     strict=True) if v is None]  # fmt: skip
        raise TransactionsError(f"abort needs --start-offset, or all of --producer-id, --producer-epoch and "
                                f"--coordinator-epoch (missing: {', '.join(missing)})")  # fmt: skip
    if args.start_offset is not None and any(v is not None for v in explicit):
        raise TransactionsError(
            "--start-offset finds the producer itself: give it alone, or give --producer-id, "
            "--producer-epoch and --coordinator-epoch instead"
        )
    if args.start_offset is not None and args.start_offset < 0:
        raise TransactionsError(f"--start-offset: expected an offset >= 0, got {args.start_offset}")
    admin = _admin(args)
    try:
        spec: AbortSpec
        if args.start_offset is not None:
            (found,) = admin.describe_producers([(args.topic, args.partition)])
            spec = abort_spec_at_offset(found, args.start_offset)
        else:
            admin.leader(args.topic, args.partition)
            spec = explicit_abort_spec(args.topic, args.partition, *explicit)
        admin.abort(spec)
    finally:
        admin.close()
    headers = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "Result"]
    rows = [[spec.topic, spec.partition, spec.producer_id, spec.producer_epoch, spec.coordinator_epoch,
             "aborted"]]  # fmt: skip
    _emit(args, out, headers, rows)
    return 0


def add_commands(
    commands: Any,
    connection: argparse.ArgumentParser,
    wrap: Any,
    client_settings: Callable[[argparse.Namespace], dict[str, Any]],
) -> None:
    """`transactions ...` on the `kappaflow` parser; `connection` holds --bootstrap-server, --config
    and --timeout, which `client_settings` turns into librdkafka settings, and `wrap` quiets the client's
    log, as for the other toolbox commands (cli_tools.py passes them: importing it here would be a
    cycle)."""
    common = argparse.ArgumentParser(add_help=False, parents=[connection])
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    group = commands.add_parser(
        "transactions", help="list, describe, find hanging and abort transactions (KIP-664)"
    )
    group.set_defaults(client_settings=client_settings)
    actions = group.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[common], help="transactional ids the coordinators know")
    listing.add_argument("--state", action="append", help="only this state, e.g. Ongoing (repeatable)")
    listing.add_argument(
        "--producer-id", type=int, action="append", help="only this producer id (repeatable)"
    )
    listing.set_defaults(func=wrap(lambda a: list_command(a, sys.stdout)))
    describe = actions.add_parser(
        "describe", parents=[common], help="a transactional id's current transaction"
    )
    describe.add_argument("--transactional-id", required=True)
    describe.set_defaults(func=wrap(lambda a: describe_command(a, sys.stdout)))
    producers = actions.add_parser(
        "describe-producers", parents=[common], help="a partition's producers and their open transactions"
    )
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    producers.set_defaults(func=wrap(lambda a: describe_producers_command(a, sys.stdout)))
    hanging = actions.add_parser(
        "find-hanging", parents=[common], help="open transactions no coordinator will end"
    )
    hanging.add_argument("--topic", action="append", help="search this topic (repeatable; default: all)")
    hanging.add_argument("--partition", type=int, help="only this partition (with one --topic)")
    hanging.add_argument(
        "--max-transaction-timeout-minutes",
        type=float,
        default=15.0,
        metavar="N",
        help="consider transactions open longer than this (default 15: the broker's "
        "transaction.max.timeout.ms)",
    )
    hanging.set_defaults(func=wrap(lambda a: find_hanging_command(a, sys.stdout)))
    abort = actions.add_parser(
        "abort", parents=[common], help="write an abort marker for an open transaction"
    )
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="the first offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    abort.set_defaults(func=wrap(lambda a: abort_command(a, sys.stdout)))
