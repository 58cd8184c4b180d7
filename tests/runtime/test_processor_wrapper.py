"""KIP-1112, `processor.wrapper.class`: every processor - the DSL's, the Processor API's and a global
store's - is built through the configured wrapper, which sees each record; sources and sinks are not
processors and are not wrapped. A wrapper that only delegates changes nothing in the output."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow import BaseProcessor, Materialized, ProcessorWrapper, Record, StreamsBuilder, Topology, serdes
from kappaflow.api.errors import ConfigError
from kappaflow.api.processor import Processor, ProcessorContext, ProcessorSupplier
from kappaflow.testing import TopologyTestDriver
from kappaflow.topology.nodes import ProcessorSpec

S = serdes.String()


class _Traced:
    """Delegates to the wrapped processor, noting (node, key) of each record it is given."""

    def __init__(self, name: str, inner: Processor[Any, Any], seen: list[tuple[str, Any]]) -> None:
        self.name, self.inner, self.seen = name, inner, seen

    def init(self, context: ProcessorContext) -> None:
        self.inner.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        self.seen.append((self.name, record.key))
        self.inner.process(record)

    def close(self) -> None:
        self.inner.close()


class Tracer:
    """A wrapper given as a class: instantiated by the runtime, configured with the app's config."""

    instances: list[Tracer] = []

    def __init__(self) -> None:
        self.wrapped: list[str] = []
        self.seen: list[tuple[str, Any]] = []
        self.config: dict[str, Any] = {}
        Tracer.instances.append(self)

    def configure(self, config: dict[str, Any]) -> None:
        self.config = config

    def wrap_processor_supplier(self, processor_name: str, supplier: ProcessorSupplier) -> ProcessorSupplier:
        self.wrapped.append(processor_name)
        return lambda: _Traced(processor_name, supplier(), self.seen)


class _Upper(BaseProcessor):
    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record.with_value(record.value.upper()))


def _topology() -> Topology:
    builder = StreamsBuilder()
    regions = builder.global_table(
        "regions", key_serde=S, value_serde=S, materialized=Materialized.as_("regions")
    )
    words = builder.stream("in", key_serde=S, value_serde=S).filter(lambda k, v: v != "skip")
    words.process(_Upper, name="upper").join(regions, lambda k, v: k, lambda v, r: f"{v}@{r}").to("joined")
    words.group_by_key().count(Materialized.as_("counts")).to_stream().to("counts", value_serde=serdes.Long())
    return builder.build()


def _run(config: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    defaults = {"default.key.serde": "String", "default.value.serde": "String"}
    with TopologyTestDriver(_topology(), {"application.id": "wrap", **defaults, **config}) as driver:
        driver.create_input_topic("regions", S, S).pipe_input("k1", "eu", 1)
        words = driver.create_input_topic("in", S, S)
        for index, value in enumerate(["a", "skip", "b"]):
            words.pipe_input("k1", value, 10 + index)
        joined = driver.create_output_topic("joined", S, S).read_key_values_to_list()
        counts = driver.create_output_topic("counts", S, serdes.Long()).read_key_values_to_list()
    return joined, counts


def test_every_processor_is_wrapped_and_sees_its_records() -> None:
    Tracer.instances.clear()
    plain = _run({})
    assert (
        _run({"processor.wrapper.class": Tracer})
        == plain
        == (
            [("k1", "A@eu"), ("k1", "B@eu")],
            [("k1", 1), ("k1", 2)],
        )
    )
    topology = _topology()
    processors = {n.name for n in topology.nodes.values() if isinstance(n, ProcessorSpec)}
    processors |= {g.processor.name for g in topology.global_stores.values()}
    wrapped = {name for tracer in Tracer.instances for name in tracer.wrapped}
    assert wrapped == processors  # DSL, Processor API ("upper") and the global store's processor
    seen = [entry for tracer in Tracer.instances for entry in tracer.seen]
    assert ("upper", "k1") in seen and seen.count(("upper", "k1")) == 2  # "skip" was filtered before it
    filter_node = next(n for n in processors if n.startswith("KSTREAM-FILTER-"))
    assert seen.count((filter_node, "k1")) == 3
    assert all(tracer.config["application.id"] == "wrap" for tracer in Tracer.instances)


def test_a_wrapper_by_path_or_instance() -> None:
    Tracer.instances.clear()
    _run({"processor.wrapper.class": f"{__name__}:Tracer"})
    assert Tracer.instances and Tracer.instances[0].seen
    shared = Tracer()
    _run({"processor.wrapper.class": shared})
    assert isinstance(shared, ProcessorWrapper) and "upper" in shared.wrapped and shared.config == {}


def test_a_wrapper_that_is_not_one_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="processor.wrapper.class.*wrap_processor_supplier"):
        _run({"processor.wrapper.class": object()})

    class Broken:
        def wrap_processor_supplier(self, processor_name: str, supplier: ProcessorSupplier) -> Any:
            return None

    with pytest.raises(ConfigError, match="wrapping processor 'KTABLE-SOURCE-0000000001' returned None"):
        _run({"processor.wrapper.class": Broken()})
