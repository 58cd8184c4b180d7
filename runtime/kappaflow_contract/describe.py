"""The JSON `kappaflow describe <entry> --json` prints and the operator reads: its schema, both sides.

The runtime writes it (kappaflow.topology.describe) and reads it back when it prepares its own topics
(kappaflow.runner.topics); the operator never imports the user's code: a describe Job runs the app's
image and publishes this document, which the operator validates like any untrusted input. Readers
ignore fields they do not know, so a newer runtime may add fields (the runtime also writes `nodes`,
`global_stores` and a changelog's `store`); a change an older reader would misread must raise
`SCHEMA_VERSION`, and a reader refuses a version above the one it knows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1
"""The version `kappaflow describe --json` writes as `schema_version`; absent (older runtimes) means 1."""


class _Lenient(BaseModel):
    # Newer runtimes may add fields; an older operator must still read the parts it knows.
    model_config = ConfigDict(extra="ignore")


class SubTopology(_Lenient):
    id: int
    source_topics: list[str] = Field(default_factory=list)
    sink_topics: list[str] = Field(default_factory=list)
    stores: list[str] = Field(default_factory=list)


class InternalTopic(_Lenient):
    name: Annotated[str, Field(min_length=1)]
    """Short name; the full topic is `<application.id>-<name>` (kappaflow_contract.topics)."""
    type: Literal["changelog", "repartition"]
    config: dict[str, str] = Field(default_factory=dict)
    partitions_from: list[str] = Field(default_factory=list)
    """Topics whose largest partition count this one takes (kappaflow_contract.topics.resolve_partitions)."""
    partitions: Annotated[int, Field(ge=1)] | None = None
    """An explicit count (`repartition(number_of_partitions=...)` and what it feeds)."""

    @model_validator(mode="after")
    def _has_count(self) -> InternalTopic:
        if self.partitions is None and not self.partitions_from:
            raise ValueError(f"internal topic {self.name}: neither partitions nor partitions_from")
        return self


class TopologyDescription(_Lenient):
    schema_version: Annotated[int, Field(ge=1, le=SCHEMA_VERSION)] = 1
    sub_topologies: list[SubTopology] = Field(default_factory=list)
    source_topics: list[str] = Field(default_factory=list)
    sink_topics: list[str] = Field(default_factory=list)
    internal_topics: list[InternalTopic] = Field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> TopologyDescription:
        """Parse describe output; tolerates log lines before the JSON document (from the first `{`)."""
        text = text.strip()
        start = text.find("{")
        if start < 0:
            raise ValueError("describe output holds no JSON object")
        return cls.model_validate(json.loads(text[start:]))

    def fingerprint(self) -> str:
        """A stable hash of the topology: equal topologies hash equal whatever the key order.

        The schema version is left out: a runtime that starts writing it describes the same topology,
        and the fingerprint is on the pod template (a new one would roll every pod).
        """
        data = self.model_dump(mode="json", exclude={"schema_version"})
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]
