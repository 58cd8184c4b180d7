"""When the stream thread commits next, and how long a poll may wait meanwhile: pure decisions.

`commit.interval.ms` is how often a commit happens. Kafka Streams' StreamThread counts it from the end
of the last commit (`lastCommitMs` is taken after the commit), which stretches every period by the
commit's own duration, and kappaflow did the same. Under exactly_once_v2 a record's output becomes
visible only after two commits (its repartition records are read read_committed), so each period's
extra length lands on the end-to-end latency about twice: in the word count latency bench
(bench/latency.py, 100 ms commits, a loaded machine) kappaflow's commits took 18-22 ms at the median
and started 8-10 ms late, so its periods were 128-134 ms, not 100.

So a thread that keeps up with its input counts the interval from each commit's *start*: its spare time
goes into committing on schedule. A thread that does not keep up (it never found its consumer's queue
empty since the last commit) counts from the end, as Java does: more frequent commits would take their
time out of processing, at 20-40 ms a commit 15-40% more of it, and cost throughput where throughput is
what is short. Either way at least `MIN_PROCESSING_SHARE` of an interval passes between the end of one
commit and the start of the next, so a slow broker cannot turn the loop into back-to-back commits.

A commit that was not due (a user's `context.commit()`, a revocation's) leaves the schedule alone, as
in Kafka Streams (a requested commit does not move `lastCommitMs`): a Processor API user who asks for a
commit after each of its own batches would otherwise postpone every scheduled commit, and with it the
emission of everything the record caches hold, by as long as the requests keep coming.

And a poll that waits for records (none fetched) waits no longer than until the next commit is due,
when there is something to commit: with records trickling in, a `poll.ms` wait (100 ms) that starts just
before the due time postponed the commit by up to that much.
"""

from __future__ import annotations

# The share of an interval that passes between the end of a commit and the start of the next, at least.
MIN_PROCESSING_SHARE = 0.5


def next_commit_due(
    due: float, started: float, finished: float, interval: float, caught_up: bool, scheduled: bool
) -> float:
    """The (monotonic) time the next commit is due after one that ran from `started` to `finished`.

    `due`: when this commit was due; `scheduled`: it ran because that time had come. A commit that ran
    for another reason (requested by a task, or a revocation's) keeps `due`. `caught_up`: the thread
    found nothing left to process at least once since the previous scheduled commit (it had time to
    spare): an interval after the commit's start, but never sooner than `MIN_PROCESSING_SHARE` of one
    after its end. Otherwise an interval after its end (Kafka Streams')."""
    if not scheduled:
        return due
    if not caught_up:
        return finished + interval
    return max(started + interval, finished + interval * MIN_PROCESSING_SHARE)


def poll_wait(poll_timeout: float, now: float, commit_due: float, pending: bool) -> float:
    """How long a poll for records may block: `poll.ms`, cut short at the next commit's due time (0 when
    it is due already: the loop then commits without waiting) when a commit has something to do
    (`pending`: a task processed, punctuated or asked for a commit since the last one). An idle thread
    with nothing to commit waits the whole `poll.ms`: with `commit.interval.ms=0` it would spin."""
    if not pending:
        return poll_timeout
    return max(0.0, min(poll_timeout, commit_due - now))
