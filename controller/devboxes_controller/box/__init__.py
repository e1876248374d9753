"""One box: its Kubernetes objects, the template the release wants, its wire status and its
activity. Pure functions."""
