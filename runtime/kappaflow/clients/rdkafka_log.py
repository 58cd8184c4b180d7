"""librdkafka's own log lines, through Python logging: aggregated, and a warning that names the broker.

Left alone, librdkafka writes its lines straight to stderr (`%3|1795701767.700|FAIL|...`): neither text nor
JSON, unfiltered by the log level, and one per client per reconnect attempt, so an instance started while
its broker is down printed ~1800 of them a minute. Every client kappaflow makes gets `logger=` (see
`with_logger`): confluent-kafka then queues the lines and hands them to that logger from the client's
poll calls. Here they become records of the `kappaflow.clients.librdkafka` logger, and:

- a line repeated (same facility and text once its timings are stripped, from any client of the process)
  is written once per `REPEAT_INTERVAL_S`, the next time with how many were left out meanwhile;
- the first connection failure to a broker also gets kappaflow's own warning, on the
  `kappaflow.clients` logger, naming the broker and `bootstrap.servers` (`connect_warning`).

Admin clients are polled by nobody: one daemon thread polls them (`serve_logs`), so their lines arrive as
they happen instead of piling up in memory. A consumer cannot be served that way (its poll waits while its
owner's `committed()` call runs): the consumers that never fetch poll themselves now and then
(`serve_consumer_logs`), the others' lines arrive through their owners' consume calls.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("kappaflow.clients")
rdkafka_log = logging.getLogger("kappaflow.clients.librdkafka")

REPEAT_INTERVAL_S = 30.0
SERVE_INTERVAL_S = 0.5
_MAX_KEYS = 1000

# "(after 0ms in state CONNECT)", "(after 3ms in state UP, 5 identical error(s) suppressed)"
_TIMINGS = re.compile(r"\s*\((after \d+ms in state \w+)?(, )?(\d+ identical error\(s\) suppressed)?\)")
_CONNECT_FAILURE = ("Connect to ", "Failed to resolve", "brokers are down", "Connection refused")


class _Repeats:
    """Which lines were written when, and how many like them were left out since (process-wide)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._seen: dict[tuple[str, ...], tuple[float, int]] = {}

    def admit(self, key: tuple[str, ...]) -> int | None:
        """None to leave the line out; else how many like it were left out since it was last written."""
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < REPEAT_INTERVAL_S:
                self._seen[key] = (last[0], last[1] + 1)
                return None
            if len(self._seen) >= _MAX_KEYS:
                self._seen.clear()
            self._seen[key] = (now, 0)
            return last[1] if last is not None else 0

    def reset(self) -> None:
        with self._lock:
            self._seen.clear()


_repeats = _Repeats()


class LibrdkafkaLog:
    """The `logger` a client is given: confluent-kafka calls `.log(level, "%s [%s] %s", fac, name, buf)`."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def log(self, level: int, msg: str, *args: Any) -> None:
        if len(args) == 3:
            facility, client, text = (str(a) for a in args)
        else:  # not confluent-kafka's usual shape: pass it on as it is
            facility, client, text = "", "", msg % args if args else msg
        if not rdkafka_log.isEnabledFor(level) and not _is_connect_failure(text):
            return
        plain = _TIMINGS.sub("", text)
        if _is_connect_failure(text):
            broker = _broker_address(plain)
            left_out = _repeats.admit(("connect", self.bootstrap, broker))
            if left_out is not None:
                log.warning(
                    "%s%s", connect_warning(self.bootstrap, broker, _reason(plain)), _left_out(left_out)
                )
            level = min(level, logging.WARNING)  # retried until default.api.timeout.ms: not an error yet
        left_out = _repeats.admit((facility, plain))
        if left_out is not None:
            rdkafka_log.log(level, "%s: %s: %s%s", client, facility, plain, _left_out(left_out))


# "kafka-1:9092/1: Connect to ipv4#10.0.0.7:9092 failed": the broker as librdkafka names it (its
# advertised or bootstrap address, then its node id or "bootstrap"), then the resolved address it tried
_BROKER_NAME = re.compile(r"^(\S+?)/(?:\d+|bootstrap): ")
_CONNECT_TO = re.compile(r"Connect to (?:ipv[46]#)?(\S+) failed")


def _broker_address(text: str) -> str:
    """The broker a connection failure is about, by the name it was given (a bootstrap entry or its
    advertised address), else the address tried; "" when the line names none ("3/3 brokers are down")."""
    found = _BROKER_NAME.search(text) or _CONNECT_TO.search(text)
    return found.group(1) if found else ""


def connect_warning(bootstrap: str, broker: str, reason: str) -> str:
    """kappaflow's warning for a failed connection (pure). With one bootstrap address the application can
    do nothing without it; on a cluster one broker down is routine (its partitions get new leaders), so the
    warning names the broker and says so rather than suggesting the whole cluster is unreachable."""
    servers = [s.strip() for s in bootstrap.split(",") if s.strip()]
    if not broker or servers == [broker]:
        return (
            f"cannot connect to Kafka at bootstrap.servers={bootstrap}: {reason}; retrying "
            "(is the broker up, and is this its address?)"
        )
    where = "one of" if broker in servers else "learned from the metadata of"
    return (
        f"cannot connect to Kafka broker {broker} ({where} bootstrap.servers={bootstrap}): {reason}; "
        "retrying - the other brokers keep serving, and its partitions move to new leaders once the "
        "controller fences it"
    )


def _is_connect_failure(text: str) -> bool:
    return any(marker in text for marker in _CONNECT_FAILURE)


def _reason(text: str) -> str:
    """`127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused` -> its last part."""
    return text.rsplit("failed: ", 1)[-1] if "failed: " in text else text.split(": ", 1)[-1]


def _left_out(count: int) -> str:
    return f" ({count} more like it in the last {REPEAT_INTERVAL_S:.0f}s left out)" if count else ""


def with_logger(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` for a confluent-kafka client, with the logger that routes librdkafka's lines here."""
    result = dict(settings)
    result.setdefault("logger", LibrdkafkaLog(str(settings.get("bootstrap.servers", ""))))
    return result


class _LogServer:
    """One daemon thread polling (with a zero timeout) the admin clients, which nothing else polls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: weakref.WeakSet[Any] = weakref.WeakSet()
        self._thread: threading.Thread | None = None

    def add(self, client: Any) -> None:
        with self._lock:
            self._clients.add(client)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kappaflow-rdkafka-log", daemon=True)
                self._thread.start()

    def discard(self, client: Any) -> None:
        with self._lock:
            self._clients.discard(client)

    def _run(self) -> None:
        while True:
            time.sleep(SERVE_INTERVAL_S)
            with self._lock:
                clients = list(self._clients)
                for client in clients:
                    try:
                        client.poll(0)
                    except Exception:  # a client error: stop serving it
                        self._clients.discard(client)
            # outside the lock: a client whose last reference this was is destroyed here
            del clients

    def after_fork(self) -> None:
        """In a forked child: the parent's thread did not come along, and its clients are not ours."""
        self._lock = threading.Lock()
        self._clients = weakref.WeakSet()
        self._thread = None


_server = _LogServer()
os.register_at_fork(after_in_child=_server.after_fork)


def serve_logs(client: Any) -> Any:
    """Poll the admin client `client` for its log lines from now on; returned (weakly held)."""
    _server.add(client)
    return client


def serve_consumer_logs(consumer: Any) -> None:
    """Hand the log lines a consumer that never fetches has queued to logging (its owner calls this)."""
    consumer.poll(0)
