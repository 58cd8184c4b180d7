"""The lifecycle states of `KafkaStreams` (Kafka Streams' names and allowed transitions), the
uncaught-exception handler's answers, and the check of `state.dir` made before any call to Kafka: what
runner/streams.py decides with, kept apart from the object that runs the threads.

States: CREATED -> REBALANCING <-> RUNNING -> PENDING_SHUTDOWN -> NOT_RUNNING, or ERROR when the stream
thread dies and the handler says to shut down (then ERROR -> PENDING_SHUTDOWN on close).
"""

from __future__ import annotations

import enum
import tempfile
from pathlib import Path

from kappaflow.api.errors import ConfigError


class State(enum.Enum):
    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    ERROR = "ERROR"

    def is_running_or_rebalancing(self) -> bool:
        return self in (State.RUNNING, State.REBALANCING)


_ALLOWED: dict[State, set[State]] = {
    State.CREATED: {State.REBALANCING, State.PENDING_SHUTDOWN, State.ERROR},
    State.REBALANCING: {State.RUNNING, State.REBALANCING, State.PENDING_SHUTDOWN, State.ERROR},
    State.RUNNING: {State.REBALANCING, State.PENDING_SHUTDOWN, State.ERROR},
    State.PENDING_SHUTDOWN: {State.NOT_RUNNING},
    State.NOT_RUNNING: set(),
    State.ERROR: {State.PENDING_SHUTDOWN},
}


def allowed_transition(old: State, target: State) -> bool:
    return target in _ALLOWED[old]


class StreamThreadExceptionResponse(enum.Enum):
    """What the uncaught-exception handler decides (Kafka Streams' names)."""

    REPLACE_THREAD = "REPLACE_THREAD"
    SHUTDOWN_CLIENT = "SHUTDOWN_CLIENT"
    SHUTDOWN_APPLICATION = "SHUTDOWN_APPLICATION"


def check_state_dir(path: Path) -> Path:
    """Create `state.dir` and prove it writable, before any call to Kafka: a directory that cannot be
    written used to fail only once tasks opened their stores, after topics were created and the group
    joined, and without naming the setting."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".kappaflow-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"config 'state.dir': cannot write to {path}: {exc.strerror or exc}") from exc
    return path
