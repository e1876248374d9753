"""What changes boxes: the lifecycle verbs, reconciliation by the Lease holder, and
retained volumes."""
