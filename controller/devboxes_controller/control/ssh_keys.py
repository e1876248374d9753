"""People's SSH public keys: listed, added and removed, one ConfigMap per person.

Every box of the person mounts that ConfigMap, and the box's sshd reads it at each login,
so a change counts for running boxes too. The kubelet rewrites a pod's ConfigMap volumes
when the pod changes, and otherwise only at its sync period (a minute by default): each
change of keys marks the person's pods, so that their boxes take it at once. Keys are read
from the apiserver on request: they change rarely and are read rarely, so no watch is kept
for them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from devboxes_sdk.models import SshKey, SshKeyList

from ..box import authorized_keys, naming, ownership
from ..k8s import kube
from ..k8s.kube import ApiProblem, Conflict, NotFound, Obj, Unavailable, rule_broken
from ..k8s.timestamps import format_timestamp, parse_timestamp

log = logging.getLogger(__name__)

# Two changes of one person's keys at once: each is retried on the other's write.
ATTEMPTS = 4
# On each of the person's pods: the version of the keys ConfigMap last written, a change
# of the pod that has the kubelet rewrite the mounted keys.
ANNOTATION_KEYS_VERSION = "devboxes.io/keys-version"


def _key(entry: authorized_keys.Entry) -> SshKey:
    parsed = entry.key()
    return SshKey(
        fingerprint=parsed.fingerprint,
        algorithm=parsed.algorithm,
        comment=parsed.comment,
        added_at=parse_timestamp(entry.added_at),
    )


class Keys:
    def __init__(
        self,
        api: kube.ApiClient,
        namespace: str,
        clock: Callable[[], datetime],
        operator_secret: str | None,
    ) -> None:
        self._core = kube.apis(api).core
        self._namespace = namespace
        self._clock = clock
        self._operator_has_no_keys = (
            "the operator token has no SSH keys of its own: "
            + authorized_keys.operator_keys_fix(operator_secret, namespace)
            + "; to keep keys of your own, log in as yourself"
        )

    def _read(self, owner: str) -> Obj | None:
        try:
            found: Obj = kube.call(
                self._core.read_namespaced_config_map,
                authorized_keys.config_map_name(owner),
                self._namespace,
            )
        except NotFound:
            return None
        if ownership.owner_of(found) != owner:
            # Named by a digest of the person's name, so only a hand-made object gets here:
            # nobody's keys are read or written through another person's record.
            raise Conflict("the keys record under this name belongs to someone else")
        return found

    def listed(self, owner: str | None) -> SshKeyList:
        if owner is None:
            return SshKeyList(items=[])
        found = self._read(owner)
        entries = authorized_keys.entries_of(found) if found is not None else []
        return SshKeyList(items=[_key(e) for e in entries])

    def add(self, owner: str | None, text: str) -> SshKey:
        if owner is None:
            raise Conflict(self._operator_has_no_keys)
        try:
            parsed = authorized_keys.parse(text)
        except authorized_keys.KeyRejected as err:
            raise rule_broken(["body", "key"], str(err)) from None

        def added(entries: list[authorized_keys.Entry]) -> list[authorized_keys.Entry]:
            if any(e.key().fingerprint == parsed.fingerprint for e in entries):
                raise Conflict(f"the key {parsed.fingerprint} is already added")
            if len(entries) >= authorized_keys.MAX_KEYS_PER_PERSON:
                raise Conflict(
                    f"a person may have at most {authorized_keys.MAX_KEYS_PER_PERSON} keys; "
                    "remove one first"
                )
            return [*entries, authorized_keys.Entry(parsed.line, format_timestamp(self._clock()))]

        entries = self._change(owner, added)
        return _key(entries[-1])

    def remove(self, owner: str | None, fingerprint: str) -> SshKey:
        if owner is None:
            raise Conflict(self._operator_has_no_keys)
        removed: list[authorized_keys.Entry] = []

        def without(entries: list[authorized_keys.Entry]) -> list[authorized_keys.Entry]:
            kept = [e for e in entries if e.key().fingerprint != fingerprint]
            if len(kept) == len(entries):
                raise NotFound(f"no key with fingerprint {fingerprint}")
            removed[:] = [e for e in entries if e.key().fingerprint == fingerprint]
            return kept

        self._change(owner, without)
        return _key(removed[0])

    def _change(
        self,
        owner: str,
        change: Callable[[list[authorized_keys.Entry]], list[authorized_keys.Entry]],
    ) -> list[authorized_keys.Entry]:
        """Apply ``change`` to the person's keys, writing only over the version read."""
        for _ in range(ATTEMPTS):
            found = self._read(owner)
            entries = change(authorized_keys.entries_of(found) if found is not None else [])
            wanted = authorized_keys.render_config_map(
                owner,
                entries,
                self._namespace,
                naming.person_labels(owner, authorized_keys.COMPONENT_KEYS),
            )
            try:
                if found is None:
                    written = kube.write(
                        self._core.create_namespaced_config_map, self._namespace, wanted
                    )
                else:
                    wanted["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
                    written = kube.write(
                        self._core.replace_namespaced_config_map,
                        wanted["metadata"]["name"],
                        self._namespace,
                        wanted,
                    )
            except Conflict:
                continue
            self._refresh_mounts(owner, written["metadata"]["resourceVersion"])
            return entries
        raise Unavailable("the keys changed under several tries in a row; retry")

    def _refresh_mounts(self, owner: str, version: str) -> None:
        """Mark the person's pods with the keys' version, so that the kubelet rewrites
        their mounted keys now rather than at its next sync."""
        selector = ",".join(f"{k}={v}" for k, v in ownership.marks(owner)[0].items())
        patch = {"metadata": {"annotations": {ANNOTATION_KEYS_VERSION: version}}}
        try:
            pods = kube.call(
                self._core.list_namespaced_pod, self._namespace, label_selector=selector
            )
            for pod in pods.get("items") or []:
                if ownership.owner_of(pod) != owner:
                    continue
                try:
                    kube.write(
                        self._core.patch_namespaced_pod,
                        pod["metadata"]["name"],
                        self._namespace,
                        patch,
                    )
                except NotFound:
                    continue
        except ApiProblem as err:
            # The keys are saved; the boxes still take them at the kubelet's next sync.
            log.warning("keys not pushed to running boxes", extra={"error": err.detail})
