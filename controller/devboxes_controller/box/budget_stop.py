"""What a running box's Deployment carries about GPU-hour budgets: the budgets its owner
or their groups had used up when the leader last looked (so that its Event is recorded
once per crossing, by whichever replica leads), and the sentence of a stop for a budget,
which the box's status shows until it starts again.
"""

from __future__ import annotations

from ..k8s.kube import Obj
from . import naming

# The keys of the budgets used up while the box ran, one a line; gone once none is.
ANNOTATION_BUDGETS_EXCEEDED = naming.ANNOTATION_PREFIX + "budgets-exceeded"
# Written when the leader stops a box for a budget: the sentence its status shows.
ANNOTATION_BUDGET_STOPPED = naming.ANNOTATION_PREFIX + "budget-stopped"


def _annotations(deployment: Obj) -> dict[str, object]:
    return dict((deployment.get("metadata") or {}).get("annotations") or {})


def exceeded(deployment: Obj) -> frozenset[str]:
    """The keys of the budgets recorded as used up."""
    text = _annotations(deployment).get(ANNOTATION_BUDGETS_EXCEEDED)
    if not isinstance(text, str):
        return frozenset()
    return frozenset(line for line in text.split("\n") if line)


def exceeded_record(keys: frozenset[str]) -> str | None:
    """The annotation's value for ``keys``; None removes it."""
    return "\n".join(sorted(keys)) if keys else None


def stopped_message(deployment: Obj) -> str | None:
    """The message of a box stopped for a budget."""
    message = _annotations(deployment).get(ANNOTATION_BUDGET_STOPPED)
    return message if isinstance(message, str) and message else None
