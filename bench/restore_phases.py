"""Where kappaflow's start-to-running goes: a timeline of its start-up steps, for bench/restore.py.

Each step is a function of the runtime, wrapped for the duration of one run (class or module attribute,
restored afterwards) so that its first start, last end, total time and number of calls are recorded
against the clock `KafkaStreams.start()` started. Wrapping costs a few microseconds a call, and only the
per-task and per-start steps are wrapped (never a per-record function), so the timeline does not move
the figures it explains. Steps nest (a task's open includes its changelog lookups): the table says
which include which, and the gaps between them are the loop's own time (polls, waits).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import CommittedOffsetReader, WatermarkReader
from kappaflow.runner import thread as thread_module
from kappaflow.runner.bootstrap import StateBootstrapper
from kappaflow.runner.changelog_reader import ChangelogReader
from kappaflow.runner.producer import StreamsProducer
from kappaflow.runner.rebalance import RebalanceHandler
from kappaflow.runner.tasks import TaskManager
from kappaflow.runner.warmup import JoinWarmup
from kappaflow.state.concurrent_opens import ConcurrentOpens
from kappaflow.tasks.task import StreamTask

JOIN_LABEL = "subscribe"
ASSIGN_LABEL = "assignment callback (tasks opened)"
# (label, owner, attribute): in the order a start runs them; an indented label runs inside the one above
STEPS: tuple[tuple[str, Any, str], ...] = (
    ("internal topics (describe / create)", thread_module, "wait_for_topics"),
    ("clients + producer (init_transactions)", thread_module, "assemble"),
    ("  producer init", StreamsProducer, "__init__"),
    ("warm-up check (group described)", JoinWarmup, "run"),
    (JOIN_LABEL, thread_module.StreamThread, "_join"),
    (ASSIGN_LABEL, RebalanceHandler, "on_assign"),
    ("  tasks open (in order)", TaskManager, "create_actives"),
    ("    stores init (RocksDB opens submitted)", StreamTask, "initialize"),
    ("    RocksDB opens waited for (threads)", ConcurrentOpens, "wait"),
    ("    changelog ends + topic ids (all tasks)", ChangelogReader, "look_up"),
    ("    changelog register", ChangelogReader, "register"),
    ("      changelog end offsets", WatermarkReader, "__call__"),
    ("      changelog topic ids", InternalTopicManager, "topic_ids"),
    ("      committed offsets", CommittedOffsetReader, "__call__"),
    ("      snapshot bootstrap check", StateBootstrapper, "__call__"),
    ("restore steps (consume + write)", ChangelogReader, "step"),
    ("  restore finish (checkpoint, init)", ChangelogReader, "_finish"),
)


@dataclass
class Span:
    """One step's calls: first start and last end (seconds after start()), time inside, call count."""

    first: float = -1.0
    last: float = -1.0
    inside: float = 0.0
    calls: int = 0


@dataclass
class Timeline:
    """The spans of one run, and the moments start() was called and RUNNING was reached."""

    started: float = 0.0
    running: float = -1.0
    # seconds after start() at which the bench first saw a restored record and saw the last one (-1: not
    # seen): they split the restore steps into the wait for the first fetch, the body and the tasks' ends
    first_record: float = -1.0
    last_record: float = -1.0
    spans: dict[str, Span] = field(default_factory=dict)

    def at(self) -> float:
        return time.perf_counter() - self.started


def _timed(timeline: Timeline, label: str, original: Callable[..., Any]) -> Callable[..., Any]:
    span = timeline.spans.setdefault(label, Span())

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        begin = timeline.at()
        try:
            return original(*args, **kwargs)
        finally:
            end = timeline.at()
            if span.first < 0:
                span.first = begin
            span.last, span.inside, span.calls = end, span.inside + end - begin, span.calls + 1

    return call


@contextmanager
def recorded(timeline: Timeline) -> Iterator[Timeline]:
    """Wrap every step of STEPS for the duration of the block (restored even when the run fails)."""
    with ExitStack() as stack:
        for label, owner, name in STEPS:
            original = getattr(owner, name)
            setattr(owner, name, _timed(timeline, label, original))
            stack.callback(setattr, owner, name, original)
        yield timeline


def print_timeline(title: str, timeline: Timeline) -> None:
    """The steps by first start: when each began and ended after start(), its time inside, calls."""
    print(f"\n{title}: seconds after start()")
    print(f"{'step':<44}{'from':>8}{'to':>8}{'inside':>9}{'calls':>7}")
    for label, _owner, _name in STEPS:
        span = timeline.spans.get(label)
        if span is None or not span.calls:
            continue
        print(f"{label:<44}{span.first:>8.3f}{span.last:>8.3f}{span.inside:>9.3f}{span.calls:>7}")
    joined, assigned = timeline.spans.get(JOIN_LABEL), timeline.spans.get(ASSIGN_LABEL)
    if joined is not None and assigned is not None and joined.calls and assigned.calls:
        print(f"{'group join wait (subscribed -> assigned)':<44}{joined.last:>8.3f}{assigned.first:>8.3f}"
              f"{assigned.first - joined.last:>9.3f}")  # fmt: skip
    first, last = timeline.first_record, timeline.last_record
    if first >= 0 and last >= 0:
        print(f"{'first restored record seen -> last one':<44}{first:>8.3f}{last:>8.3f}{last - first:>9.3f}")
        print(f"{'last record -> RUNNING (tasks end)':<44}{last:>8.3f}{timeline.running:>8.3f}"
              f"{timeline.running - last:>9.3f}")  # fmt: skip
    print(f"{'RUNNING':<44}{timeline.running:>8.3f}")
