"""The compiled graph: node specs, sub-topologies, internal topics and descriptions."""

from kappaflow.topology.nodes import InternalTopicSpec, SubTopology
from kappaflow.topology.topology import Topology

__all__ = ["InternalTopicSpec", "SubTopology", "Topology"]
