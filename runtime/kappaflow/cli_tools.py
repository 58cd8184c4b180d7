"""`kappaflow topics | produce | consume`: the getting-started toolbox, thin clients over confluent-kafka.

A Kafka Streams user's first five minutes need topics created, a few records written and the output
read back. Java users reach for kafka-topics.sh and the console producer/consumer, which need a JVM and
the Kafka distribution; these do the same with the client kappaflow already ships, reading the cluster
address (and security settings) from the same places `kappaflow run` does: `--bootstrap-server`, else
`bootstrap.servers` in `--config` or KAPPAFLOW_BOOTSTRAP_SERVERS, else localhost:9092. Every failure is
one line naming the broker address. Records are produced with the Java-compatible murmur2 partitioner,
so a key lands where Kafka Streams (and kappaflow) would put it; the consumer reads read_committed by
default, so what an exactly-once application has not committed is not shown.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import StreamsError
from kappaflow.api.serdes import Bytes, Double, Integer, Long, Serde, String
from kappaflow.clients.kafka import connection_settings
from kappaflow.clients.rdkafka_log import with_logger

DEFAULT_BOOTSTRAP = "localhost:9092"
FORMATS: dict[str, Callable[[], Serde[Any]]] = {
    "string": String,
    "long": Long,
    "integer": Integer,
    "double": Double,
    "bytes": Bytes,
}


class ToolError(StreamsError):
    """A toolbox command failed; the message names the broker address or the input at fault."""


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """librdkafka settings: the address and security settings, as `kappaflow run` would use them."""
    config = StreamsConfig.load(file=args.config)
    base: dict[str, Any] = {"bootstrap.servers": DEFAULT_BOOTSTRAP}
    if "bootstrap.servers" in config:
        base = connection_settings(config)
    if args.bootstrap_server:
        base["bootstrap.servers"] = args.bootstrap_server
    return base


def _unreachable(bootstrap: str, exc: BaseException) -> ToolError:
    return ToolError(f"cannot reach Kafka at bootstrap.servers={bootstrap}: {exc}")


def _metadata(client: Any, bootstrap: str, timeout: float) -> Any:
    """Every topic's metadata (asking for one by name could make the broker auto-create it)."""
    try:
        return client.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise _unreachable(bootstrap, exc) from exc


def _require_topic(metadata: Any, topic: str, bootstrap: str) -> Any:
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise ToolError(
            f"topic '{topic}' does not exist on bootstrap.servers={bootstrap} "
            f"(create it: kappaflow topics create {topic} --partitions <n>)"
        )
    return found


# ----------------------------------------------------------------------------------------------- topics
def topics_list(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_of(args)
    metadata = _metadata(AdminClient(with_logger(settings)), settings["bootstrap.servers"], args.timeout)
    for name in sorted(metadata.topics):
        if name.startswith("__") and not args.all:
            continue
        print(f"{name}\t{len(metadata.topics[name].partitions)} partitions", file=out)
    return 0


def parse_topic_configs(items: Iterable[str]) -> dict[str, str]:
    """`--config-entry key=value` items (e.g. cleanup.policy=compact) as a dict."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ToolError(f"--topic-config: expected key=value, got '{item}'")
        result[key] = value
    return result


def topics_create(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_of(args)
    bootstrap = settings["bootstrap.servers"]
    admin = AdminClient(with_logger(settings))
    _metadata(admin, bootstrap, args.timeout)  # an unreachable broker is said as such, not as a timeout
    configs = parse_topic_configs(args.topic_config)
    new = [NewTopic(t, num_partitions=args.partitions, replication_factor=args.replication_factor,
                    config=configs) for t in args.topics]  # fmt: skip
    failed = 0
    for name, future in admin.create_topics(new, operation_timeout=args.timeout).items():
        try:
            future.result(timeout=args.timeout + 5)
        except KafkaException as exc:
            error = exc.args[0]
            if args.if_not_exists and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                print(f"topic '{name}' already exists", file=out)
                continue
            print(
                f"kappaflow: error: cannot create topic '{name}' on bootstrap.servers={bootstrap}: "
                f"{error.str()}",
                file=sys.stderr,
            )
            failed += 1
            continue
        print(f"created topic '{name}' ({args.partitions} partitions)", file=out)
    return 1 if failed else 0


def topics_delete(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_of(args)
    bootstrap = settings["bootstrap.servers"]
    admin = AdminClient(with_logger(settings))
    metadata = _metadata(admin, bootstrap, args.timeout)
    for topic in args.topics:
        _require_topic(metadata, topic, bootstrap)
    for name, future in admin.delete_topics(args.topics, operation_timeout=args.timeout).items():
        try:
            future.result(timeout=args.timeout + 5)
        except KafkaException as exc:
            raise ToolError(f"cannot delete topic '{name}' on {bootstrap}: {exc.args[0].str()}") from exc
        print(f"deleted topic '{name}'", file=out)
    return 0


def topics_describe(args: argparse.Namespace, out: TextIO) -> int:
    """Like `kafka-topics.sh --describe`: partitions with leader, replicas and in-sync replicas, and the
    settings that differ from the broker's defaults."""
    settings = settings_of(args)
    bootstrap = settings["bootstrap.servers"]
    admin = AdminClient(with_logger(settings))
    metadata = _metadata(admin, bootstrap, args.timeout)
    found = [_require_topic(metadata, t, bootstrap) for t in args.topics]
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in args.topics]
    configs = admin.describe_configs(resources)
    for topic, resource in zip(found, resources, strict=True):
        try:
            entries = configs[resource].result(timeout=args.timeout)
        except KafkaException as exc:
            raise ToolError(f"cannot describe topic '{topic.topic}' on {bootstrap}: {exc}") from exc
        changed = sorted(f"{e.name}={e.value}" for e in entries.values() if not e.is_default)
        print(f"Topic: {topic.topic}\tPartitionCount: {len(topic.partitions)}\t"
              f"Configs: {','.join(changed) or '-'}", file=out)  # fmt: skip
        for pid in sorted(topic.partitions):
            part = topic.partitions[pid]
            print(f"\tPartition: {pid}\tLeader: {part.leader}\tReplicas: {','.join(map(str, part.replicas))}"
                  f"\tIsr: {','.join(map(str, part.isrs))}", file=out)  # fmt: skip
    return 0


# ---------------------------------------------------------------------------------------------- produce
def parse_line(line: str, number: int, separator: str | None) -> tuple[str | None, str]:
    """`key<separator>value` when a separator is given (split at its first occurrence), else a value."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise ToolError(f"line {number}: no key separator '{separator}' in {line!r}")
    return key, value


def _encode(serde: Serde[Any], topic: str, text: str, what: str, number: int) -> bytes | None:
    fmt = type(serde).__name__.lower()
    try:
        value: Any = text
        if isinstance(serde, (Long, Integer)):
            value = int(text)
        elif isinstance(serde, Double):
            value = float(text)
        elif isinstance(serde, Bytes):
            value = text.encode()
        return serde.serialize(topic, value)
    except (ValueError, StreamsError) as exc:
        raise ToolError(f"line {number}: the {what} {text!r} is not a {fmt}: {exc}") from exc


def produce(args: argparse.Namespace, lines: Iterable[str], out: TextIO) -> int:
    settings = settings_of(args)
    bootstrap = settings["bootstrap.servers"]
    producer = Producer(with_logger({**settings, "partitioner": "murmur2_random", "acks": "all",
                                     "enable.idempotence": True, "linger.ms": 5}))  # fmt: skip
    _require_topic(_metadata(producer, bootstrap, args.timeout), args.topic, bootstrap)
    key_serde, value_serde = FORMATS[args.key_format](), FORMATS[args.value_format]()
    separator = args.key_separator if args.parse_key else None
    failures: list[str] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failures.append(err.str())

    count = 0
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if not line and args.skip_empty:
            continue
        key_text, value_text = parse_line(line, number, separator)
        key = _encode(key_serde, args.topic, key_text, "key", number) if key_text is not None else None
        value = _encode(value_serde, args.topic, value_text, "value", number)
        while True:
            try:
                producer.produce(args.topic, value=value, key=key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        count += 1
    remaining = producer.flush(args.timeout)
    if remaining or failures:
        reason = failures[0] if failures else f"{remaining} not delivered within {args.timeout:.0f}s"
        raise ToolError(f"producing to '{args.topic}' on bootstrap.servers={bootstrap} failed: {reason}")
    print(f"produced {count} record(s) to '{args.topic}'", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------- consume
def _decode(serde: Serde[Any], topic: str, data: bytes | None) -> str:
    if data is None:
        return "null"
    if isinstance(serde, Bytes):
        return data.hex()
    try:
        return str(serde.deserialize(topic, data))
    except StreamsError as exc:
        return f"<not a {type(serde).__name__.lower()}: {len(data)} bytes: {exc}>"


def consume(args: argparse.Namespace, out: TextIO, stop: threading.Event | None = None) -> int:
    """Read `topic` (every partition, no group) until --max-records, --idle-timeout or SIGINT/SIGTERM."""
    settings = settings_of(args)
    bootstrap = settings["bootstrap.servers"]
    consumer = Consumer(with_logger({**settings, "group.id": "kappaflow-console", "enable.auto.commit": False,
                                     "isolation.level": args.isolation_level}))  # fmt: skip
    stop = stop or _stop_on_signals()
    try:
        found = _require_topic(_metadata(consumer, bootstrap, args.timeout), args.topic, bootstrap)
        start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
        consumer.assign([TopicPartition(args.topic, p, start) for p in sorted(found.partitions)])
        key_serde, value_serde = FORMATS[args.key_format](), FORMATS[args.value_format]()
        count = 0
        for message in _messages(consumer, stop, args.idle_timeout):
            value = _decode(value_serde, args.topic, message.value())
            if args.print_key:
                value = f"{_decode(key_serde, args.topic, message.key())}{args.key_separator}{value}"
            try:
                print(value, file=out, flush=True)
            except BrokenPipeError:  # piped into `head`: the reader has what it wanted
                return 0
            count += 1
            if args.max_records is not None and count >= args.max_records:
                break
        print(f"consumed {count} record(s) from '{args.topic}'", file=sys.stderr)
        return 0
    finally:
        consumer.close()


def _messages(consumer: Consumer, stop: threading.Event, idle_timeout: float | None) -> Iterator[Any]:
    import time

    last = time.monotonic()
    while not stop.is_set():
        message = consumer.poll(0.2)
        if message is None:
            if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                return
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                continue
            if error.fatal() or not error.retriable():
                raise ToolError(f"consuming '{message.topic()}' failed: {error.str()}")
            continue
        last = time.monotonic()
        yield message


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda _signum, _frame: stop.set())
    return stop


# ----------------------------------------------------------------------------------------------- parser
@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """A tool prints its own one-line errors: of the client's log, only kappaflow's warning that names
    the broker it cannot reach is shown (librdkafka's own lines only from ERROR up) while it runs; the
    level is restored after, so a caller in the same process (a test, a notebook) keeps its own."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="kappaflow: %(message)s")
    librdkafka = logging.getLogger("kappaflow.clients.librdkafka")
    before = librdkafka.level
    librdkafka.setLevel(logging.ERROR)
    try:
        yield
    finally:
        librdkafka.setLevel(before)


def _tool(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def call(args: argparse.Namespace) -> int:
        with quiet_logs():
            return run(args)

    return call


def add_commands(commands: Any) -> None:
    """`topics`, `produce`, `consume` and `transactions` on the `kappaflow` parser's sub-commands."""
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument(
        "--bootstrap-server",
        help=f"host:port (default: bootstrap.servers of --config or "
        f"KAPPAFLOW_BOOTSTRAP_SERVERS, else {DEFAULT_BOOTSTRAP})",
    )
    connection.add_argument(
        "--config", help="a .properties file: its bootstrap.servers and security settings"
    )
    connection.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the broker")
    formats = argparse.ArgumentParser(add_help=False)
    formats.add_argument("--key-format", choices=sorted(FORMATS), default="string")
    formats.add_argument(
        "--value-format",
        choices=sorted(FORMATS),
        default="string",
        help="long for Kafka's LongSerializer (word count's output), ...",
    )
    formats.add_argument("--key-separator", default=":", help="between key and value (default ':')")

    topics = commands.add_parser("topics", help="list, create, describe or delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[connection], help="topics with their partition counts")
    listing.add_argument("--all", action="store_true", help="include internal topics (__consumer_offsets...)")
    listing.set_defaults(func=_tool(lambda a: topics_list(a, sys.stdout)))
    create = actions.add_parser("create", parents=[connection], help="create topics")
    create.add_argument("topics", nargs="+", metavar="TOPIC")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=-1, help="default: the broker's")
    create.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic setting, e.g. cleanup.policy=compact (repeatable)",
    )
    create.add_argument("--if-not-exists", action="store_true", help="an existing topic is not an error")
    create.set_defaults(func=_tool(lambda a: topics_create(a, sys.stdout)))
    describe = actions.add_parser("describe", parents=[connection], help="partitions, leaders, settings")
    describe.add_argument("topics", nargs="+", metavar="TOPIC")
    describe.set_defaults(func=_tool(lambda a: topics_describe(a, sys.stdout)))
    delete = actions.add_parser("delete", parents=[connection], help="delete topics")
    delete.add_argument("topics", nargs="+", metavar="TOPIC")
    delete.set_defaults(func=_tool(lambda a: topics_delete(a, sys.stdout)))

    producing = commands.add_parser(
        "produce", parents=[connection, formats], help="write records: the arguments, else stdin's lines"
    )
    producing.add_argument("topic")
    producing.add_argument("values", nargs="*", help="records to write (default: one per line of stdin)")
    producing.add_argument("--parse-key", action="store_true", help="lines are key<separator>value")
    producing.add_argument("--skip-empty", action="store_true", help="ignore empty lines")
    producing.set_defaults(func=_tool(lambda a: produce(a, a.values or sys.stdin, sys.stdout)))

    consuming = commands.add_parser("consume", parents=[connection, formats], help="print a topic's records")
    consuming.add_argument("topic")
    consuming.add_argument("--from-beginning", action="store_true", help="default: only new records")
    consuming.add_argument("--max-records", type=int, help="stop after this many")
    consuming.add_argument(
        "--idle-timeout",
        type=float,
        metavar="SECONDS",
        help="stop when nothing arrived for this long (default: run until Ctrl-C)",
    )
    consuming.add_argument("--print-key", action="store_true", help="print key<separator>value")
    consuming.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help="read_committed (default) hides records of open or aborted transactions",
    )
    consuming.set_defaults(func=_tool(lambda a: consume(a, sys.stdout)))

    from kappaflow.cli_transactions import add_commands as add_transaction_commands

    add_transaction_commands(commands, connection, _tool, settings_of)
