"""Python's garbage collector set for a process whose work is stream threads.

Why: CPython collects its youngest generation every 700 net allocations of container objects, and a
stream thread allocates in batches - a consume() of 1000 records becomes record tuples, Headers and record
contexts that live until the batch is processed. Those survive the frequent young collections, are
promoted, and their promotion is what triggers full collections, each of which walks every object of the
process (the imported libraries, the topology, the clients: ~20 ms per collection in the word count
benchmark). Measured there with `gc.callbacks`: 3.3 us per input line in the collector, 2.5 of it in full
collections, about a tenth of the stream thread's CPU time; with these settings no collection ran while
the records were processed.

Two settings, process-wide, so the library never applies them to a process it does not own:
- `gc.freeze()`: everything allocated so far (modules, the topology, the configuration) moves to the
  permanent generation, which collections no longer walk;
- a young-generation threshold of 50,000: more than a consume batch's worth of objects, so a batch is
  processed and freed before a collection looks at it.
Reference counting still frees every acyclic object at once; only cycles wait for a collection, and
those the collector still finds.

`kappaflow run` applies them before starting the application, and every worker process of
`num.stream.threads` > 1 at its start. An application that embeds `KafkaStreams` in a process of its own
may call `tune_gc_for_streaming()` before `start()`.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

YOUNG_GENERATION_THRESHOLD = 50_000


def tune_gc_for_streaming() -> None:
    """Freeze the objects allocated so far and collect the young generation every 50,000 net
    allocations instead of 700; the older generations keep their thresholds. It does not collect first:
    a forked worker must never collect what it inherited (runner/worker_process.py)."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)
    log.info(
        "garbage collector set for stream work: %d start-up objects frozen, young generation collected"
        " every %d allocations",
        gc.get_freeze_count(),
        YOUNG_GENERATION_THRESHOLD,
    )
