"""`topology.optimization`: which of Kafka Streams' topology rewrites a value asks for.

Shared by the runtime (`StreamsBuilder.build(props)`, config validation at start-up) and the operator
(a StreamApp's `spec.config`), so both accept and refuse the same values with the same message. The rules
are Java's `StreamsConfig.verifyTopologyOptimizationConfigs`: a comma-separated list (blanks around the
commas ignored) of the individual rewrites, or `all` or `none` alone. The standard library only.
"""

from __future__ import annotations

from typing import Any

TOPOLOGY_OPTIMIZATION = "topology.optimization"
NO_OPTIMIZATION = "none"
OPTIMIZE = "all"
REUSE_KTABLE_SOURCE_TOPICS = "reuse.ktable.source.topics"
MERGE_REPARTITION_TOPICS = "merge.repartition.topics"
SINGLE_STORE_SELF_JOIN = "single.store.self.join"

# the individual rewrites, in the order Java applies them
REWRITES = (REUSE_KTABLE_SOURCE_TOPICS, MERGE_REPARTITION_TOPICS, SINGLE_STORE_SELF_JOIN)
ACCEPTED = (OPTIMIZE, NO_OPTIMIZATION, *REWRITES)


class OptimizationConfigError(ValueError):
    """A `topology.optimization` value Java's StreamsConfig would refuse."""


def optimization_rewrites(value: Any) -> frozenset[str]:
    """The rewrites `value` enables (None: none of them). Raises `OptimizationConfigError` for a value
    Java refuses: an unknown name, or `all`/`none` combined with anything else."""
    if value is None:
        return frozenset()
    text = str(value).strip()
    names = [part.strip() for part in text.split(",")]
    accepted = ", ".join(f"'{name}'" for name in ACCEPTED)
    if (OPTIMIZE in names or NO_OPTIMIZATION in names) and len(names) > 1:
        raise OptimizationConfigError(
            f"'{TOPOLOGY_OPTIMIZATION}'={text!r} is not valid: 'all' and 'none' stand alone "
            f"(accepted: {accepted}, or a comma-separated list of the others)"
        )
    unknown = [name for name in names if name not in ACCEPTED]
    if unknown:
        raise OptimizationConfigError(
            f"'{TOPOLOGY_OPTIMIZATION}'={text!r} is not valid: unknown optimization {unknown[0]!r} "
            f"(accepted: {accepted}, or a comma-separated list of the others)"
        )
    if OPTIMIZE in names:
        return frozenset(REWRITES)
    return frozenset(name for name in names if name != NO_OPTIMIZATION)
