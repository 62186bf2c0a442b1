"""Graph -> kernel calls: fused groups lowered to kernels (executable.py), deduplicated, in-place and memory plans."""
