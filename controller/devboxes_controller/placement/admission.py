"""What the box namespace's LimitRanges and ResourceQuotas make of a box's pod, judged as
the apiserver's admission would.

A request left out defaults to the limit; each LimitRange's Container ``default`` and
``defaultRequest`` then fill what is still unset. The pod is refused when a LimitRange's
``min``, ``max`` or ``maxLimitRequestRatio`` is not met per container or per pod, when a
quota tracks CPU or memory that a container does not declare, or when a quota has not
room for it. Pure: a rendered pod spec and plain API objects in, problems out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from ..config.formats import quantity_value
from ..k8s.kube import Obj

Resources = dict[str, Decimal]

# Quotas on these make admission demand that every container declares the value.
DECLARED = {
    "cpu": ("requests", "cpu"),
    "requests.cpu": ("requests", "cpu"),
    "limits.cpu": ("limits", "cpu"),
    "memory": ("requests", "memory"),
    "requests.memory": ("requests", "memory"),
    "limits.memory": ("limits", "memory"),
}
# Resources a quota may also name without the ``requests.`` prefix.
BARE = ("cpu", "memory", "ephemeral-storage")
# Quota scopes no box pod is in: boxes have no deadline, declare requests and use no
# cross-namespace affinity. A PriorityClass scope matches only a pod that has a class.
OTHER_SCOPES = frozenset({"Terminating", "BestEffort", "CrossNamespacePodAffinity"})
BINARY_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


@dataclass(frozen=True)
class Problem:
    message: str
    fix: str
    # Only what other pods hold now is in the way: the box fits once they release it.
    for_now: bool = False


@dataclass(frozen=True)
class Container:
    name: str
    requests: Resources
    limits: Resources


def _resources(values: Mapping[str, object]) -> Resources:
    return {str(k): quantity_value(str(v)) for k, v in values.items()}


def show(value: Decimal, resource: str) -> str:
    """A quantity as an operator writes it: 250m, 2, 4Gi."""
    if "memory" in resource or "storage" in resource:
        for suffix, factor in BINARY_UNITS:
            if value >= factor and value % factor == 0:
                return f"{value // factor}{suffix}"
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


def _limit_items(limit_ranges: Iterable[Obj], kind: str) -> Iterable[tuple[str, Obj]]:
    for limit_range in limit_ranges:
        for item in (limit_range.get("spec") or {}).get("limits") or []:
            if item.get("type") == kind:
                yield limit_range["metadata"]["name"], item


def admitted_containers(pod_spec: Obj, limit_ranges: Sequence[Obj]) -> list[Container]:
    """The pod's containers with the values pod defaulting and the LimitRanges give them."""
    found = []
    defaults = list(_limit_items(limit_ranges, "Container"))
    for container in [*(pod_spec.get("initContainers") or []), *pod_spec["containers"]]:
        resources = container.get("resources") or {}
        limits = _resources(resources.get("limits") or {})
        requests = {**limits, **_resources(resources.get("requests") or {})}
        for _, item in defaults:
            # The apiserver's own defaulting of a LimitRange: a missing default limit is
            # the max, a missing default request the default limit, else the min.
            default = {**(item.get("max") or {}), **(item.get("default") or {})}
            default_request = {
                **(item.get("min") or {}),
                **default,
                **(item.get("defaultRequest") or {}),
            }
            for resource, value in _resources(default_request).items():
                requests.setdefault(resource, value)
            for resource, value in _resources(default).items():
                limits.setdefault(resource, value)
        found.append(Container(container["name"], requests, limits))
    return found


def _pod_total(containers: Sequence[Container], kind: str) -> Resources:
    total: Resources = {}
    for container in containers:
        for resource, value in getattr(container, kind).items():
            total[resource] = total.get(resource, Decimal(0)) + value
    return total


def _bounds(
    source: str, item: Obj, scope: str, requests: Resources, limits: Resources, what: str
) -> Problem | None:
    """One LimitRange item against one container's or the pod's values."""
    per = str(item.get("type")).lower()
    for resource, text in (item.get("max") or {}).items():
        most = quantity_value(str(text))
        limit = limits.get(resource)
        if limit is None:
            return Problem(
                f"{source} caps {resource} at {text} per {per}, which needs a {resource} "
                f"limit on {scope}, and {what} sets none",
                f"remove max {resource} for type {item.get('type')} from {source}, or give "
                f"its Container type a default {resource}",
            )
        value = max(limit, requests.get(resource, Decimal(0)))
        if value > most:
            return Problem(
                f"{source} allows at most {text} {resource} per {per}; {what} sets "
                f"{show(value, resource)} on {scope}",
                f"raise max {resource} in {source} to at least {show(value, resource)}",
            )
    for resource, text in (item.get("min") or {}).items():
        least = quantity_value(str(text))
        request = requests.get(resource)
        if request is None:
            return Problem(
                f"{source} requires at least {text} {resource} per {per}, which needs a "
                f"{resource} request on {scope}, and {what} sets none",
                f"remove min {resource} for type {item.get('type')} from {source}, or give "
                f"its Container type a default {resource} request",
            )
        value = min(request, limits.get(resource, request))
        if value < least:
            asked = show(value, resource)
            return Problem(
                f"{source} requires at least {text} {resource} per {per}; {what} sets "
                f"{asked} on {scope}",
                f"lower min {resource} in {source} to at most {asked}",
            )
    for resource, text in (item.get("maxLimitRequestRatio") or {}).items():
        ratio = quantity_value(str(text))
        request, limit = requests.get(resource), limits.get(resource)
        if not request or not limit:
            return Problem(
                f"{source} bounds the {resource} limit-to-request ratio per {per}, which "
                f"needs both on {scope}, and {what} does not set both",
                f"remove maxLimitRequestRatio {resource} from {source}",
            )
        if limit / request > ratio:
            shown = f"{limit / request:.4g}"
            return Problem(
                f"{source} allows a {resource} limit at most {text} times the request per "
                f"{per}; {what} has {shown} on {scope}",
                f"raise maxLimitRequestRatio {resource} in {source} to at least {shown}",
            )
    return None


def limit_range_problems(
    containers: Sequence[Container], limit_ranges: Sequence[Obj], what: str
) -> list[Problem]:
    """What the LimitRanges refuse; ``what`` names the box in the messages."""
    found = []
    for name, item in _limit_items(limit_ranges, "Container"):
        for container in containers:
            problem = _bounds(
                f"LimitRange {name}",
                item,
                f"its {container.name} container",
                container.requests,
                container.limits,
                what,
            )
            if problem is not None:
                found.append(problem)
    requests, limits = _pod_total(containers, "requests"), _pod_total(containers, "limits")
    for name, item in _limit_items(limit_ranges, "Pod"):
        problem = _bounds(f"LimitRange {name}", item, "the pod", requests, limits, what)
        if problem is not None:
            found.append(problem)
    for container in containers:
        for resource, request in container.requests.items():
            limit = container.limits.get(resource)
            if limit is not None and request > limit:
                asked = show(request, resource)
                found.append(
                    Problem(
                        f"a LimitRange's default {resource} limit {show(limit, resource)} is "
                        f"below the request {asked} of {what} on its {container.name} "
                        "container",
                        f"raise the Container default {resource} in the namespace's "
                        f"LimitRange to at least {asked}",
                    )
                )
                break
    return found


def pod_usage(containers: Sequence[Container]) -> Resources:
    """What one more pod adds to each quota key."""
    usage: Resources = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for resource, value in _pod_total(containers, "requests").items():
        usage[f"requests.{resource}"] = value
        if resource in BARE:
            usage[resource] = value
    for resource, value in _pod_total(containers, "limits").items():
        usage[f"limits.{resource}"] = value
    return usage


def _applies(quota: Obj) -> bool:
    spec = quota.get("spec") or {}
    if OTHER_SCOPES & set(spec.get("scopes") or []):
        return False
    for expression in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        scope, operator = expression.get("scopeName"), expression.get("operator")
        if scope in OTHER_SCOPES:
            return False
        if scope == "PriorityClass" and operator not in ("DoesNotExist", "NotIn"):
            return False
    return True


def quota_problems(
    containers: Sequence[Container], quotas: Sequence[Obj], what: str, namespace: str
) -> list[Problem]:
    """What the ResourceQuotas refuse; ``for_now`` when only their current use does."""
    found = []
    usage = pod_usage(containers)
    for quota in quotas:
        if not _applies(quota):
            continue
        source = f"ResourceQuota {quota['metadata']['name']}"
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = (quota.get("status") or {}).get("used") or {}
        for key in sorted(set(hard) & set(DECLARED)):
            kind, resource = DECLARED[key]
            singular = kind.removesuffix("s")
            for container in containers:
                if resource not in getattr(container, kind):
                    found.append(
                        Problem(
                            f"{source} tracks {key}, so every container must declare a "
                            f"{resource} {singular}; {what} has none on its {container.name} "
                            "container",
                            f"add a LimitRange with a default {resource} {singular} to "
                            f"namespace {namespace}, or remove {key} from {source}",
                        )
                    )
        for key, need in usage.items():
            if key not in hard:
                continue
            allowed = quantity_value(str(hard[key]))
            asked = show(need, key)
            if need > allowed:
                found.append(
                    Problem(
                        f"{source} allows {hard[key]} {key}, less than {what} asks ({asked})",
                        f"raise {key} in {source} to at least {asked}",
                    )
                )
                continue
            left = allowed - quantity_value(str(used.get(key, "0")))
            if need > left:
                found.append(
                    Problem(
                        f"{source} has {show(max(left, Decimal(0)), key)} of {hard[key]} {key} "
                        f"left, less than {what} asks ({asked})",
                        f"raise {key} in {source}, or free some: its pods in namespace "
                        f"{namespace} hold the rest",
                        for_now=True,
                    )
                )
    return found
