"""When the stream thread commits next, and how long a poll may wait meanwhile: pure decisions.

`commit.interval.ms` is how often a commit happens. The interval is counted from a commit's *start*:
counting from its end, as Kafka Streams' StreamThread does (`lastCommitMs` is taken after the commit),
stretches every period by the commit's own duration. Under exactly_once_v2 a record's output becomes
visible only after two commits (its repartition records are read read_committed), so each period's extra
length lands twice on the end-to-end latency: in the word count latency bench (bench/latency.py, 100 ms
commits) kappaflow's commits took 20-40 ms under load and its periods were 150 ms, not 100.

Two bounds keep that schedule from costing throughput or overshooting:
- a commit that takes longer than its interval is not followed at once by the next one: at least
  `MIN_PROCESSING_SHARE` of an interval passes after a commit ends before the next one starts, so a slow
  broker cannot turn the loop into back-to-back commits (counting from the end guaranteed the whole
  interval);
- a poll waiting for records (none fetched) waits no longer than until the next commit is due: with
  records trickling in, a `poll.ms` wait (100 ms) could start just before the due time and postpone the
  commit by up to that much (the bench saw commits start 10-60 ms late).
"""

from __future__ import annotations

# The share of an interval that passes between the end of a commit and the start of the next, at least.
MIN_PROCESSING_SHARE = 0.5


def next_commit_due(started: float, finished: float, interval: float) -> float:
    """The (monotonic) time the next commit is due after one that ran from `started` to `finished`:
    an interval after its start, but never sooner than `MIN_PROCESSING_SHARE` of one after its end."""
    return max(started + interval, finished + interval * MIN_PROCESSING_SHARE)


def poll_wait(poll_timeout: float, now: float, commit_due: float) -> float:
    """How long a poll for records may block: `poll.ms`, cut short at the next commit's due time (0 when
    it is due already: the loop then commits without waiting)."""
    return max(0.0, min(poll_timeout, commit_due - now))
