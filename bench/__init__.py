"""Benchmarks: the end-to-end harness (`switchyard bench`), probes and profiles."""
