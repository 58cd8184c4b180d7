"""Error handlers: what happens to a record that cannot be deserialized, processed or produced.

A handler is configured by name (`log_and_continue`, `log_and_fail`, `continue`, `fail`) or as a callable
`(error, record_description) -> HandlerResponse`. Whatever the handler decides, the record is never lost
silently: with `errors.dead.letter.queue.topic.name` set, a skipped record goes to the dead-letter topic
with its original bytes, headers and the error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kappaflow.api.errors import ConfigError, HandlerResponse
from kappaflow.api.record import Headers

log = logging.getLogger(__name__)

ErrorHandler = Callable[[BaseException, "FailedRecord"], HandlerResponse]

DESERIALIZATION_HANDLER = "default.deserialization.exception.handler"
PROCESSING_HANDLER = "processing.exception.handler"
# what the error of a record a handler failed on says the user can do instead
SKIP_HINT = (
    "; log_and_continue skips such records, and errors.dead.letter.queue.topic.name keeps them in a topic"
)


@dataclass(frozen=True)
class FailedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    node: str = ""

    def where(self) -> str:
        at = f"{self.topic}-{self.partition}@{self.offset}" if self.topic else "a punctuation"
        return f"{at}" + (f" in node '{self.node}'" if self.node else "")


def log_and_continue(error: BaseException, record: FailedRecord) -> HandlerResponse:
    log.warning("skipping record %s: %s", record.where(), error)
    return HandlerResponse.CONTINUE


def log_and_fail(error: BaseException, record: FailedRecord) -> HandlerResponse:
    log.error("failing on record %s: %s", record.where(), error)
    return HandlerResponse.FAIL


_NAMED: dict[str, ErrorHandler] = {
    "log_and_continue": log_and_continue,
    "continue": log_and_continue,
    "log_and_fail": log_and_fail,
    "fail": log_and_fail,
}


def resolve_handler(value: Any, key: str) -> ErrorHandler:
    if callable(value):
        return value  # type: ignore[no-any-return]
    if isinstance(value, str):
        name = value.rsplit(".", 1)[-1].lower().replace("exceptionhandler", "").replace("handler", "")
        aliases = {"logandcontinue": "log_and_continue", "logandfail": "log_and_fail"}
        name = aliases.get(name.replace("_", ""), name)
        if name in _NAMED:
            return _NAMED[name]
    raise ConfigError(
        f"config '{key}': unknown handler {value!r}; use log_and_continue, log_and_fail or a callable"
    )


def handler_setting(key: str, value: Any) -> str:
    """`key=value` as the user set it (a callable by its qualified name), for error messages."""
    if callable(value):
        value = f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', repr(value))}"
    return f"{key}={value}"


def dead_letter_headers(record: FailedRecord, error: BaseException) -> Headers:
    """The original headers plus where the record came from and why it failed."""
    headers = record.headers.copy()
    headers.add("__kappaflow.error.class", type(error).__name__.encode())
    headers.add("__kappaflow.error.message", str(error).encode("utf-8", "replace"))
    headers.add("__kappaflow.source.topic", record.topic.encode())
    headers.add("__kappaflow.source.partition", str(record.partition).encode())
    headers.add("__kappaflow.source.offset", str(record.offset).encode())
    if record.node:
        headers.add("__kappaflow.node", record.node.encode())
    return headers
