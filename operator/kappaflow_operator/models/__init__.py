"""pydantic models of the StreamApp resource: the single source of the CRD schema (see `crdgen`)."""

from __future__ import annotations

from .common import CamelModel, Quantity, SecretKeySelector
from .pod import EnvVar, ExtraVolume, PodTemplateOverrides, Toleration
from .spec import (
    RESERVED_CONFIG_KEYS,
    Autoscaling,
    InteractiveQueries,
    KafkaConnection,
    Metrics,
    SaslConfig,
    ScaleIn,
    SparkSettings,
    StateVolume,
    StreamAppSpec,
    TlsConfig,
    Upgrade,
)
from .status import (
    AutoscalerDecision,
    AutoscalerStatus,
    Condition,
    InternalTopicStatus,
    ReprocessingRun,
    ResetProgress,
    Rollback,
    StableSpec,
    StreamAppStatus,
    TaskMovement,
    TopologyStatus,
)
from .topology import InternalTopic, SubTopology, TopologyDescription

GROUP = "kappaflow.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "StreamApp"
PLURAL = "streamapps"
SINGULAR = "streamapp"
SHORT_NAMES = ("sapp",)
FINALIZER = "kappaflow.io/topic-cleanup"

__all__ = [
    "API_VERSION",
    "FINALIZER",
    "GROUP",
    "KIND",
    "PLURAL",
    "RESERVED_CONFIG_KEYS",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "AutoscalerDecision",
    "AutoscalerStatus",
    "Autoscaling",
    "CamelModel",
    "Condition",
    "EnvVar",
    "ExtraVolume",
    "InteractiveQueries",
    "InternalTopic",
    "InternalTopicStatus",
    "KafkaConnection",
    "Metrics",
    "PodTemplateOverrides",
    "Quantity",
    "ReprocessingRun",
    "ResetProgress",
    "Rollback",
    "SaslConfig",
    "ScaleIn",
    "SecretKeySelector",
    "SparkSettings",
    "StableSpec",
    "StateVolume",
    "StreamAppSpec",
    "StreamAppStatus",
    "SubTopology",
    "TaskMovement",
    "TlsConfig",
    "Toleration",
    "TopologyDescription",
    "TopologyStatus",
    "Upgrade",
]
