"""Shared building blocks of the StreamApp schema: the base model, Kubernetes quantities, Secret refs.

Every model here is also the source of the CRD's OpenAPI schema (see `crdgen`), so each type is chosen
to have a *structural* schema: no unions except the int-or-string quantity Kubernetes itself uses, no
free-form objects except where the Kubernetes API they mirror is itself open-ended.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

#: A Kubernetes resource quantity ("500m", "1Gi", "2"). Same regular expression the API server's own
#: OpenAPI uses for `resource.Quantity`, so the CRD accepts exactly what a Pod would.
_DECIMAL = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY_PATTERN = rf"^(\+|-)?{_DECIMAL}(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_DECIMAL}))?$"


def _quantity_to_str(value: Any) -> Any:
    """Accept YAML integers and floats (`cpu: 1`) the way Kubernetes does, and keep them as strings."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return str(value)
    return value


Quantity = Annotated[
    str,
    BeforeValidator(_quantity_to_str),
    Field(pattern=QUANTITY_PATTERN),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]

#: A DNS-1123 label (Service, volume, container names).
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: A DNS-1123 subdomain (Secret, ConfigMap, ServiceAccount names).
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

SecretName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
Port = Annotated[int, Field(ge=1, le=65535)]


class CamelModel(BaseModel):
    """Base for every schema model: camelCase on the wire, snake_case in Python, unknown fields refused.

    `extra="forbid"` matters for specs validated outside the API server (tests, `kubectl apply
    --dry-run` output, GitOps linting): a typo fails loudly instead of being ignored. Objects read back
    from the API server never carry unknown fields because the structural schema prunes them.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON form stored in Kubernetes: camelCase keys, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class SecretKeySelector(CamelModel):
    """One key of a Secret in the StreamApp's namespace (the only way credentials reach a pod)."""

    name: SecretName
    """Name of the Secret."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
    """Key inside the Secret."""
