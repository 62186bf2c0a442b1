"""Running work in isolated child processes: resource limits, a framed pickle channel, the sandboxed compile."""
