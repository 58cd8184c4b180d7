"""The global task: keeps every global store complete, from all partitions of its topic.

Global stores are read by any task of the instance, so the global task runs before stream tasks process
anything (it bootstraps to the topic's end) and then keeps applying updates as they arrive.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Record
from kappaflow.api.wrapper import configured_wrapper, wrapped_supplier
from kappaflow.state.api import RecordContext
from kappaflow.tasks.collector import RecordCollector
from kappaflow.tasks.context import ProcessorContextImpl
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.nodes import ProcessorNode, SourceNode
from kappaflow.tasks.state_manager import ProcessorStateManager
from kappaflow.tasks.task import resolve_serde
from kappaflow.topology.topology import Topology

GLOBAL_TASK_ID = TaskId(-1, -1)


class GlobalTask:
    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        collector: RecordCollector,
        metrics: Metrics,
        state_root: Path,
        clock: Callable[[], int],
    ) -> None:
        self.topology = topology
        self.state_manager = ProcessorStateManager(state_root / "global", -1, lambda s: s)
        self.context = ProcessorContextImpl(
            GLOBAL_TASK_ID,
            config,
            collector,
            None,
            metrics,
            state_root / "global",
            lambda store: topology.global_stores[store].source.topics[0],
            self.state_manager.register,
            clock,
        )
        self.stores: dict[str, Any] = {}
        self.sources: dict[str, SourceNode] = {}
        self._processors: list[ProcessorNode] = []
        wrapper = configured_wrapper(config)  # KIP-1112: global store processors are wrapped too
        for name, spec in topology.global_stores.items():
            key_serde = resolve_serde(spec.source.key_serde, config, "default.key.serde")
            value_serde = resolve_serde(spec.source.value_serde, config, "default.value.serde")
            if key_serde is None or value_serde is None:
                raise StreamsError(f"global store '{name}' has no key or value serde")
            source = SourceNode(spec.source, key_serde, value_serde, spec.source.timestamp_extractor)
            source.bind(self.context)
            supplier = wrapped_supplier(wrapper, spec.processor.name, spec.processor.supplier)
            processor = ProcessorNode(spec.processor.name, supplier())
            source.add_child(processor)
            self.sources[spec.source.topics[0]] = source
            self._processors.append(processor)
            builder = topology.stores[name]
            self.state_manager.register_builder(builder)
            store = builder.build()
            self.stores[name] = store
            self.context.stores[name] = store
        for store in self.stores.values():
            store.init(self.context, store)
        for processor in self._processors:
            processor.init(self.context)

    def topics(self) -> list[str]:
        return list(self.sources)

    def update(self, topic: str, partition: int, raw: RawRecord) -> None:
        source = self.sources[topic]
        consumed = source.deserialize(
            topic, partition, raw.offset, raw.timestamp, raw.key, raw.value, raw.headers
        )
        self.context.current = RecordContext(raw.timestamp, topic, partition, raw.offset, raw.headers)
        self.context.current_node = source
        try:
            source.process(Record(consumed.key, consumed.value, raw.timestamp, raw.headers))
        finally:
            self.context.current_node = None

    def flush(self) -> None:
        self.state_manager.flush()

    def close(self) -> None:
        for processor in self._processors:
            processor.close()
        self.state_manager.close()
