"""Test kit shipped with the package: wrappers (latency, faults, counting) and a loopback server."""
