"""Where a box can run: free units per profile, what namespace admission makes of a pod,
and the doctor that checks the cluster's prerequisites. Pure apart from the doctor's reads."""
