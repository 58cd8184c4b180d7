"""The JSON `kappaflow describe <entry> --json` prints (the runtime contract), parsed and checked.

The operator never imports the user's code: it runs `describe` in a Job with the app's image and reads
this document back, so it is validated like any untrusted input.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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
    """Short name; the full topic is `<application.id>-<name>`."""
    type: Literal["changelog", "repartition"]
    config: dict[str, str] = Field(default_factory=dict)
    partitions_from: list[str] = Field(default_factory=list)
    partitions: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _has_count(self) -> InternalTopic:
        if self.partitions is None and not self.partitions_from:
            raise ValueError(f"internal topic {self.name}: neither partitions nor partitions_from")
        return self


class TopologyDescription(_Lenient):
    sub_topologies: list[SubTopology] = Field(default_factory=list)
    source_topics: list[str] = Field(default_factory=list)
    sink_topics: list[str] = Field(default_factory=list)
    internal_topics: list[InternalTopic] = Field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> TopologyDescription:
        """Parse describe output; tolerates log lines before the JSON document (the last `{` block)."""
        text = text.strip()
        start = text.find("{")
        if start < 0:
            raise ValueError("describe output holds no JSON object")
        return cls.model_validate(json.loads(text[start:]))

    def fingerprint(self) -> str:
        """A stable hash of the topology: equal topologies hash equal whatever the key order."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]
