"""A box's SSH node port, kept on its Deployment while the box is stopped.

A stopped box holds no Service: the cluster's node-port range (30000-32767 by default)
then bounds the boxes that run, not every box there is. So that a user's ssh command
survives a stop and a start, stop records the port its Service had, and start asks for
that port again; another Service may have taken it meanwhile, and the box then gets a new
one.
"""

from __future__ import annotations

import copy

from ..k8s.kube import Obj
from .naming import ANNOTATION_PREFIX

ANNOTATION_SSH_NODE_PORT = ANNOTATION_PREFIX + "ssh-node-port"


def node_port(service: Obj | None) -> int | None:
    """The node port of a box's SSH Service, None before Kubernetes assigned one."""
    ports = ((service or {}).get("spec") or {}).get("ports") or []
    port = ports[0].get("nodePort") if ports else None
    return int(port) if port else None


def recorded(deployment: Obj) -> int | None:
    """The node port recorded on the box; None when none was, or the record is not a port."""
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(ANNOTATION_SSH_NODE_PORT)
    if not text or not text.isascii() or not text.isdigit():
        return None
    port = int(text)
    return port if 0 < port < 65536 else None


def asking_for(service: Obj, port: int) -> Obj:
    """A copy of a rendered Service that asks Kubernetes for this node port."""
    wanted = copy.deepcopy(service)
    wanted["spec"]["ports"][0]["nodePort"] = port
    return wanted
