module devboxes.local/testbed/pause

go 1.26.0
