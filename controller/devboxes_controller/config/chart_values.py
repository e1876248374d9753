"""The Helm chart's values file: the values only the chart reads, and the settings as the
chart holds them.

The chart hands its ``controller`` block, with ``gpu`` beside it, to the controller as the
settings file, so those two blocks are :class:`.Settings` with three differences: an
empty namespace stands for the release's, ``gpu`` sits beside ``controller`` rather than
in it, and the keys that the chart's defaults set and its templates read are required,
since a values file that sets one to null deletes it (Helm drops such a key) and the
controller must not fall back to its own default unseen. The chart's values schema is
generated from :class:`ChartValues` (:mod:`.chart_schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from .base import Model, lookup
from .boxes import Hours, Presets, SshServiceType, SshSettings, TtlSettings
from .formats import DnsLabel, DnsSubdomain, Image, LabelKey, LabelValue, Quantity
from .gpu import AvailabilitySettings, GpuSettings
from .settings import Settings
from .violations import Violation, fail

MAX_REPLICAS = 10


_SUBDOMAIN: TypeAdapter[str] = TypeAdapter(DnsSubdomain)


class _EmptyOr:
    """Of a string: empty, which a template fills in, or of the format ``kind``."""

    def __init__(self, kind: Any) -> None:
        self.adapter: TypeAdapter[str] = TypeAdapter(kind)

    def check(self, value: str) -> str:
        if value:
            try:
                self.adapter.validate_python(value)
            except ValidationError as error:
                raise fail(f"must be empty or {error.errors()[0]['msg']}") from None
        return value

    def schema(self) -> WithJsonSchema:
        return WithJsonSchema(
            {"type": "string", "anyOf": [{"maxLength": 0}, self.adapter.json_schema()]}
        )


_NAMESPACE = _EmptyOr(DnsLabel)
_SECRET = _EmptyOr(DnsSubdomain)
# Empty stands for the release's namespace.
ReleaseNamespace = Annotated[StrictStr, AfterValidator(_NAMESPACE.check), _NAMESPACE.schema()]
# Empty: the chart generates the Secret.
SecretName = Annotated[StrictStr, AfterValidator(_SECRET.check), _SECRET.schema()]


# --- the controller's settings, as the chart holds them ----------------------------------


class TtlValues(TtlSettings):
    default_hours: Hours
    max_hours: Hours


class SshValues(SshSettings):
    service_type: SshServiceType


class AvailabilityValues(AvailabilitySettings):
    # The templates render the cluster-wide role from it.
    enabled: StrictBool


class GpuValues(GpuSettings):
    enabled: StrictBool


class ControllerValues(Settings):
    namespace: ReleaseNamespace = ""
    workspace_image: Image
    ttl: TtlValues
    ssh: SshValues
    presets: Presets
    availability: AvailabilityValues = Field(
        default_factory=lambda: AvailabilityValues(enabled=True)
    )
    # Beside this block in the values file (ChartValues.gpu), never in it.
    gpu: SkipJsonSchema[GpuSettings] = Field(default_factory=GpuSettings, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _gpu_beside(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "gpu" in data:
            raise fail("gpu is a block of its own beside controller, not inside it")
        return data

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        # The settings' rules need the gpu block: ChartValues runs them.
        return []


# --- what only the chart reads -----------------------------------------------------------


class ControllerImage(Model):
    repository: Annotated[StrictStr, Field(min_length=1)]
    # Empty: the chart's appVersion.
    tag: StrictStr
    pull_policy: Literal["Always", "IfNotPresent", "Never"]


class TokenSecret(Model):
    existing_secret: SecretName = Field(
        description="Name of an existing Secret holding the token (at least 32 characters); "
        "empty: the chart generates one and keeps it across upgrades."
    )
    key: Annotated[
        StrictStr, StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    ] = Field(description="Key of the token in the Secret, generated or existing.")


class ServiceValues(Model):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"]
    port: Annotated[StrictInt, Field(ge=1, le=65535)]


class IngressTls(Model):
    secret_name: StrictStr = ""
    hosts: list[StrictStr] = Field(default_factory=list)


class IngressValues(Model):
    # _rules, as JSON Schema.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"enabled": {"const": True}}},
            "then": {"required": ["host"], "properties": {"host": _SUBDOMAIN.json_schema()}},
        }
    )

    enabled: StrictBool
    class_name: StrictStr = ""
    host: StrictStr = ""
    # Passed through as the Ingress's spec.tls.
    tls: list[IngressTls] = Field(default_factory=list)

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        host = lookup(raw, "host")
        if lookup(raw, "enabled") is not True or not isinstance(host, str):
            return []
        try:
            _SUBDOMAIN.validate_python(host)
        except ValidationError as error:
            return [(("host",), f"an enabled Ingress needs a host: {error.errors()[0]['msg']}")]
        return []


# A container resource: a quantity, or a number as YAML writes 2 or 0.5.
ResourceAmount = Quantity | Annotated[float, Field(ge=0)]


class ControllerResources(Model):
    requests: dict[str, ResourceAmount] = Field(default_factory=dict)
    limits: dict[str, ResourceAmount] = Field(default_factory=dict)


class DisruptionBudget(Model):
    # A number of replicas, or a percentage of them.
    min_available: (
        Annotated[StrictInt, Field(ge=0)]
        | Annotated[StrictStr, StringConstraints(pattern=r"^([0-9]|[1-9][0-9]|100)%$")]
    )


# The label Grafana's dashboard sidecar looks for by default.
GRAFANA_SIDECAR_LABELS = {"grafana_dashboard": "1"}


class GrafanaDashboardValues(Model):
    """The usage dashboard (charts/devboxes/dashboards/) as a ConfigMap for Grafana's
    dashboard sidecar."""

    enabled: StrictBool
    # Empty: the release's namespace.
    namespace: ReleaseNamespace = ""
    # What the sidecar selects ConfigMaps by.
    labels: Annotated[dict[LabelKey, LabelValue], Field(min_length=1)]
    # E.g. the sidecar's folder annotation.
    annotations: dict[LabelKey, StrictStr] = Field(default_factory=dict)


class ChartValues(Model):
    # Helm's own values for subcharts; the chart reads none of them.
    global_: dict[str, Any] = Field(default_factory=dict, alias="global")
    image: ControllerImage
    replica_count: Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)]
    token: TokenSecret = Field(
        description="The operator bearer token's Secret. The token itself is never a value, "
        "since values are kept in the release history."
    )
    service: ServiceValues
    ingress: IngressValues = Field(default_factory=lambda: IngressValues(enabled=False))
    resources: ControllerResources = Field(default_factory=ControllerResources)
    # Only rendered when replicaCount > 1.
    pod_disruption_budget: DisruptionBudget = Field(
        default_factory=lambda: DisruptionBudget(min_available=1)
    )
    grafana_dashboard: GrafanaDashboardValues = Field(
        default_factory=lambda: GrafanaDashboardValues(
            enabled=False, labels=dict(GRAFANA_SIDECAR_LABELS)
        )
    )
    controller: ControllerValues
    gpu: GpuValues

    @classmethod
    def _rules(cls, raw: Mapping[str, Any]) -> list[Violation]:
        """The settings' rules over the settings the chart hands over: controller with gpu."""
        controller, gpu = lookup(raw, "controller"), lookup(raw, "gpu")
        if not isinstance(controller, Mapping):
            return []
        found = Settings._rules({**controller, "gpu": gpu})
        return [(("controller", *loc), message) for loc, message in found]
