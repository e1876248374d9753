"""Prometheus metrics of the controller, in one registry served at /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..k8s import kube


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "devboxes_http_requests_total",
            "API requests by route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.disconnects = Counter(
            "devboxes_http_disconnects_total",
            "Requests whose client went away before the answer began",
            ["method", "route"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "devboxes_http_request_seconds",
            "API request latency",
            ["method", "route"],
            registry=self.registry,
        )
        self.connections = Gauge(
            "devboxes_http_connections",
            "Client connections open on this replica",
            registry=self.registry,
        )
        self.connections_closed = Counter(
            "devboxes_http_connections_closed_total",
            "Client connections refused at a cap, or closed at a read deadline or for a head too "
            "large, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.tunnels = Gauge(
            "devboxes_tunnels",
            "Tunnels to boxes open on this replica",
            registry=self.registry,
        )
        self.tunnels_ended = Counter(
            "devboxes_tunnels_ended_total",
            "Tunnels to boxes refused or closed, by how they ended",
            ["outcome"],
            registry=self.registry,
        )
        self.tunnel_bytes = Counter(
            "devboxes_tunnel_bytes_total",
            "Bytes carried by tunnels to boxes, by direction",
            ["direction"],
            registry=self.registry,
        )
        self.preview_requests = Counter(
            "devboxes_preview_requests_total",
            "Requests on web preview hosts, by kind and by the status answered",
            ["kind", "status"],
            registry=self.registry,
        )
        # Counted where the writes are sent.
        self.writes = kube.WRITTEN
        self.registry.register(self.writes)
        self.status_updates = Counter(
            "devboxes_status_updates_total",
            "Box statuses recomputed after a watched change",
            registry=self.registry,
        )
        self.mount_retries = Counter(
            "devboxes_mount_retries_total",
            "Box pods whose node was refused their volumes for a moment, retried at once",
            registry=self.registry,
        )
        self.expired = Counter(
            "devboxes_ttl_expirations_total",
            "Boxes stopped because their time to live ran out",
            registry=self.registry,
        )
        self.stop_warnings = Counter(
            "devboxes_stop_warnings_total",
            "Owners warned that their box stops soon, by the stop's reason",
            ["reason"],
            registry=self.registry,
        )
        self.webhooks = Counter(
            "devboxes_stop_warning_webhooks_total",
            "Stop-warning webhook attempts by outcome: delivered, retried, given_up",
            ["outcome"],
            registry=self.registry,
        )
        self.bookings = Counter(
            "devboxes_bookings_total",
            "Bookings by what befell them: booked, cancelled, kept (a box cut short for one), "
            "started (their box), used, released",
            ["event"],
            registry=self.registry,
        )
        self.repairs = Counter(
            "devboxes_repairs_total",
            "Objects recreated by reconciliation",
            ["kind"],
            registry=self.registry,
        )
        self.watch_failures = Counter(
            "devboxes_watch_failures_total",
            "Watch or list attempts that failed and were retried, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.availability_recounts = Counter(
            "devboxes_availability_recounts_total",
            "Full recounts of what every node offers and every pod takes, checking the "
            "running totals GPU availability is computed from",
            registry=self.registry,
        )
        self.availability_disagreements = Counter(
            "devboxes_availability_recount_disagreements_total",
            "Figures (one node, one resource) in which a recount found the running totals "
            "wrong, by table: used by pods or allocatable on nodes",
            ["table"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "devboxes_leader",
            "1 while this replica holds the reconciler lease",
            registry=self.registry,
        )
        self.usage_device_seconds = Counter(
            "devboxes_usage_device_seconds_total",
            "Device-seconds GPU boxes held, by owner, profile and how the device was held: "
            "busy, idle or unknown (no fresh reading); counted by the leader",
            ["owner", "profile", "held"],
            registry=self.registry,
        )
        self.usage_group_device_seconds = Counter(
            "devboxes_usage_group_device_seconds_total",
            "Device-seconds the boxes of a group's members held, by group, profile and how "
            "the device was held; a box counts for each group its owner was in",
            ["group", "profile", "held"],
            registry=self.registry,
        )
        self.usage_waiting_seconds = Counter(
            "devboxes_usage_waiting_seconds_total",
            "Seconds running GPU boxes waited for their device, by owner and profile",
            ["owner", "profile"],
            registry=self.registry,
        )
        self.usage_people_waiting = Gauge(
            "devboxes_usage_people_waiting",
            "People with a GPU box waiting for its device, by profile, at the leader's last "
            "usage pass",
            ["profile"],
            registry=self.registry,
        )
        self.boxes = Gauge("devboxes_boxes", "Boxes by state", ["state"], registry=self.registry)

    def boxes_changed(self) -> None:
        self.status_updates.inc()


METRICS = Metrics()
