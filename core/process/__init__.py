"""Isolated child processes: resource limits, a framed pickle channel, `python -m` children, the sandboxed fork."""
