"""Benchmarks of tensorfile against the reference libraries; run from the repository root
with ``python -m benchmarks.run`` (``make bench``)."""
