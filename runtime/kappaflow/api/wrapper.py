"""KIP-1112, `processor.wrapper.class`: one hook that wraps every processor of a topology.

Why: tracing, logging or timing each processor otherwise means editing every DSL call and every Processor
API supplier. Kafka Streams 4.x lets an application name a `ProcessorWrapper` once in its configuration;
each processor node's supplier - the DSL's own and the user's, global store processors included - is
passed through `wrap_processor_supplier(name, supplier)` and the returned supplier builds the node's
processor. Sources and sinks are not processors and are not wrapped, as in Java.

The configured value is a wrapper object, a class (instantiated without arguments, and given the
configuration through `configure(config)` when it has one, as Java's `Configurable`) or a path to
either (`module:attr` or `module.attr`, for properties files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kappaflow.api.errors import ConfigError
from kappaflow.api.imports import import_object
from kappaflow.api.processor import ProcessorSupplier

if TYPE_CHECKING:
    from kappaflow.api.config import StreamsConfig

WRAPPER_KEY = "processor.wrapper.class"


@runtime_checkable
class ProcessorWrapper(Protocol):
    """Java's `ProcessorWrapper`: return the supplier to build processor node `processor_name` with (the
    given one, or one whose processors delegate to the given one's)."""

    def wrap_processor_supplier(self, processor_name: str, supplier: ProcessorSupplier) -> ProcessorSupplier:
        """The supplier node `processor_name` is built with; called once per node and task."""
        ...


def configured_wrapper(config: StreamsConfig) -> ProcessorWrapper | None:
    """The wrapper `processor.wrapper.class` names, ready to use, or None when it is not set."""
    value: Any = config.get(WRAPPER_KEY)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = import_object(value, WRAPPER_KEY, "processor wrapper")
    if isinstance(value, type):
        value = value()
        configure = getattr(value, "configure", None)
        if callable(configure):
            configure(config.as_dict())
    if not isinstance(value, ProcessorWrapper):
        raise ConfigError(
            f"config '{WRAPPER_KEY}': {value!r} has no wrap_processor_supplier(processor_name, supplier)"
        )
    return value


def wrapped_supplier(
    wrapper: ProcessorWrapper | None, processor_name: str, supplier: ProcessorSupplier
) -> ProcessorSupplier:
    """`supplier` passed through `wrapper`; a wrapper returning something not callable is an error naming
    the processor."""
    if wrapper is None:
        return supplier
    wrapped = wrapper.wrap_processor_supplier(processor_name, supplier)
    if not callable(wrapped):
        raise ConfigError(
            f"config '{WRAPPER_KEY}': wrapping processor '{processor_name}' returned {wrapped!r}, "
            "not a processor supplier"
        )
    return wrapped
