"""Assembling a stream thread's parts: each is built once and handed what it works with, so no part
reaches through another. Topic preparation retries a broker that is not reachable yet (start-up during a
broker restart must not become a crash loop)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import (
    CommittedOffsetReader,
    KafkaRecordCollector,
    WatermarkReader,
    is_consumer_protocol,
    new_consumer,
)
from kappaflow.runner.bootstrap import BootstrapSettings, StateBootstrapper, group_peers
from kappaflow.runner.changelog_reader import ChangelogReader
from kappaflow.runner.commit import Committer
from kappaflow.runner.global_state import GlobalStateUpdater
from kappaflow.runner.held_inputs import HeldInputs
from kappaflow.runner.metadata import TopologyIndex, endpoint_of
from kappaflow.runner.native_produce import failure_plugin, native_send
from kappaflow.runner.native_restore import restore_queues
from kappaflow.runner.open_transactions import hanging_after_s
from kappaflow.runner.producer import StreamsProducer, production_handler
from kappaflow.runner.rebalance import RebalanceHandler
from kappaflow.runner.retry import retry_unreachable
from kappaflow.runner.routing import changelog_messages
from kappaflow.runner.standbys import StandbyPlacer
from kappaflow.runner.tasks import TaskManager
from kappaflow.runner.topics import PreparedTopics, RepartitionPurger, prepare_topics
from kappaflow.runner.warmup import JoinWarmup
from kappaflow.tasks import native
from kappaflow.topology.topology import Topology


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ThreadParts:
    admin: InternalTopicManager
    topics: PreparedTopics
    purger: RepartitionPurger
    producer: StreamsProducer
    collector: KafkaRecordCollector
    global_state: GlobalStateUpdater | None
    tasks: TaskManager
    committer: Committer
    rebalance: RebalanceHandler
    standbys: StandbyPlacer
    warmup: JoinWarmup
    held_inputs: HeldInputs | None  # exactly_once_v2 only


def wait_for_topics(
    topology: Topology, config: StreamsConfig, admin: InternalTopicManager, stop: threading.Event
) -> PreparedTopics:
    """Topic preparation, retried while the broker cannot be reached, until `stop` is set."""
    api_timeout_s = config.get_int("default.api.timeout.ms") / 1000.0
    prepare = functools.partial(prepare_topics, topology, config, admin)
    return retry_unreachable("preparing topics", prepare, api_timeout_s, stop=stop)


def state_bootstrapper(
    topology: Topology,
    config: StreamsConfig,
    settings: dict[str, dict[str, Any]],
    metrics: Metrics,
    admin: InternalTopicManager,
    static: bool,
) -> StateBootstrapper | None:
    """Fetches stores without local state from a peer's standby (runner/bootstrap.py); None when
    disabled or when the application keeps no standbys (there is nothing to fetch from). This
    instance's own endpoint (`application.server`, in its consumer's client.id) is only needed to
    never ask itself; the peers are found by theirs."""
    own = endpoint_of(str(settings["consumer"].get("client.id", "")))
    bootstrap = BootstrapSettings.from_config(config)
    if not bootstrap.enabled or config.get_int("num.standby.replicas") <= 0:
        return None
    app_id = config.application_id
    peers = group_peers(
        lambda: admin.group_members(app_id, static=static),
        TopologyIndex(topology, app_id),
        config.get_int("num.standby.replicas"),
    )
    return StateBootstrapper(bootstrap, peers, str(own) if own is not None else "", metrics)


def assemble(
    topology: Topology,
    config: StreamsConfig,
    settings: dict[str, dict[str, Any]],
    metrics: Metrics,
    state_lock: threading.RLock,
    commit: Callable[[], None],
    on_assignment: Callable[[bool], None],
    admin: InternalTopicManager,
    topics: PreparedTopics,
    restore_consumer: Consumer | None = None,
    bounds: WatermarkReader | None = None,
) -> ThreadParts:
    """`commit` and `on_assignment` are the stream thread's, called back by the rebalance handler;
    `admin` prepared `topics` (`wait_for_topics`). `restore_consumer` and `bounds`: the changelog
    reader's clients, if the thread created them before (runner/early_consumer.py); they are owned by
    the reader from here."""
    api_timeout_s = config.get_int("default.api.timeout.ms") / 1000.0
    purge_interval_s = config.get_int("repartition.purge.interval.ms") / 1000.0
    purger = RepartitionPurger(admin, topics.repartition_topics, purge_interval_s)
    handler = production_handler(config.get("production.exception.handler"))
    core = native.core(
        config.get_bool("kappaflow.native.enabled") and config.get_bool("kappaflow.native.produce.enabled")
    )
    # at at_least_once the core's plugin reports the failed deliveries of what it sends (native_produce)
    plugin = None if core is None or config.exactly_once else failure_plugin(core)
    producer = StreamsProducer(
        settings["producer"],
        config.exactly_once,
        handler,
        api_timeout_s,
        failure_plugin=plugin,
    )
    collector = KafkaRecordCollector(producer, admin)
    # with the plugin, the native send's records carry no delivery state: no report unless one fails
    on_error = None if producer.reports_failures_natively else collector.report_error
    sender = None if core is None else native_send(core, producer, collector.send, on_error)
    if core is not None and sender is not None:
        collector.use_native(sender)
        if config.get_bool("kappaflow.native.changelog.enabled"):
            changelog = native_send(
                core, producer, collector.send_changelog, collector.report_offset, "changelog_producer"
            )
            if changelog is not None:
                collector.use_native_changelog(changelog)
    global_state = None
    if topology.global_stores:
        global_state = GlobalStateUpdater(topology, config, collector, metrics, settings["restore"], now_ms)
        global_state.bootstrap()
    if bounds is None:
        bounds = WatermarkReader(settings["restore"])
    hanging_s = hanging_after_s(
        config.get_int("kappaflow.hanging.transaction.ms"),
        int(settings["producer"].get("transaction.timeout.ms", 60000)),
    )
    committed = CommittedOffsetReader(settings["restore"], settings["consumer"]["group.id"])
    app_id, subs = config.application_id, topology.sub_topologies()
    instance_id = str(settings["consumer"].get("group.instance.id") or "")
    if restore_consumer is None:
        restore_consumer = new_consumer(settings["restore"])
    restore_core = native.core(config.get_bool("kappaflow.native.enabled"))
    queues = (
        restore_queues(restore_core, restore_consumer)
        if config.get_bool("kappaflow.native.restore.enabled")
        else None
    )
    reader = ChangelogReader(
        restore_consumer, metrics, bounds, api_timeout_s, admin.topic_ids,
        hanging_s if config.exactly_once else None, committed,
        state_bootstrapper(topology, config, settings, metrics, admin, bool(instance_id)),
        changelog_messages(restore_core), queues,
    )  # fmt: skip
    cache = native.new_thread_cache(
        config.get_int("statestore.cache.max.bytes"), config.get_bool("kappaflow.native.enabled")
    )
    tasks = TaskManager(
        topology, config, collector, cache, metrics, reader, now_ms,
        global_state.stores if global_state is not None else None,
    )  # fmt: skip
    incremental = is_consumer_protocol(settings["consumer"])
    policies = topology.offset_reset_policies()  # user topics: their names need no resolving
    rebalance = RebalanceHandler(
        tasks, producer, commit, on_assignment, state_lock, incremental, policies, now_ms
    )
    standbys = StandbyPlacer(
        tasks,
        lambda: admin.group_members(app_id, static=bool(instance_id)),
        lambda task_id: bool(subs[task_id.subtopology].stores),
        config.get_int("num.standby.replicas"),
    )
    warmup = JoinWarmup(
        tasks,
        lambda: admin.group_members(app_id, static=bool(instance_id)),
        instance_id,
        lambda task_id: bool(subs[task_id.subtopology].stores),
        metrics,
        config.get_int("acceptable.recovery.lag"),
        config.get_int("max.warmup.replicas"),
        config.get_int("probing.rebalance.interval.ms") / 1000.0,
        state_lock=state_lock,
    )
    return ThreadParts(
        admin,
        topics,
        purger,
        producer,
        collector,
        global_state,
        tasks,
        Committer(producer, metrics, api_timeout_s),
        rebalance,
        standbys,
        warmup,
        HeldInputs(bounds, metrics, hanging_s) if config.exactly_once else None,
    )
