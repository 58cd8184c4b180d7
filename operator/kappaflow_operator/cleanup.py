"""The finalizer's decision, pure: apply topicCleanupPolicy to the internal topics.

Owned objects (StatefulSet, Services, ConfigMaps, claims) go by garbage collection; only the topics in
Kafka are the operator's to remove, and only with `topicCleanupPolicy: Delete`. Which topics: those
status recorded and those the published topology names under the application id the pods ran with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .desired.common import TOPOLOGY_KEY
from .effects import DeleteTopics, Effect, Event
from .models import TopologyDescription
from .snapshot import spec_or_none, status_of
from .topics import internal_topic_names


def decide_cleanup(body: Mapping[str, Any], topology_configmap: Mapping[str, Any] | None) -> list[Effect]:
    """The finalizer's effects: apply topicCleanupPolicy. Owned objects go by garbage collection."""
    spec = spec_or_none(body)
    if spec is None:
        return []  # never got far enough to create topics
    if spec.topic_cleanup_policy != "Delete":
        return [Event("Normal", "TopicsRetained", "topicCleanupPolicy Retain: internal topics kept", False)]
    prev = status_of(body)
    app_id = (prev.application_id if prev is not None else None) or spec.application_id
    names = {t.name for t in (prev.internal_topics if prev is not None else [])}
    data = (topology_configmap or {}).get("data") or {}
    if TOPOLOGY_KEY in data:
        names |= set(internal_topic_names(TopologyDescription.parse(data[TOPOLOGY_KEY]), app_id))
    return [DeleteTopics(sorted(names), announce=True)]
