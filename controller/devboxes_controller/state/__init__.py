"""What the controller knows: the watch caches, what they keep, the store of boxes derived
from them, cluster-wide GPU availability, kept response bodies, and the metrics."""
