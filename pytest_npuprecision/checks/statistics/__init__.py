"""Statistics dumps judged offline: what one dump's Max, Min, Mean and Norm prove of each call on their own
(invariants.py), how far two dumps of the same step part beyond what their inputs explain (propagation.py), and
msprobe's checksums compared (checksums.py); run.py judges one case."""
