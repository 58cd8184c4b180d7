"""The JSON `kappaflow describe <entry> --json` prints, parsed and checked.

The schema is part of the runtime-operator contract and is defined once, in
`kappaflow_contract.describe`; this module re-exports it for the operator's models.
"""

from __future__ import annotations

from kappaflow_contract.describe import SCHEMA_VERSION, InternalTopic, SubTopology, TopologyDescription

__all__ = ["SCHEMA_VERSION", "InternalTopic", "SubTopology", "TopologyDescription"]
