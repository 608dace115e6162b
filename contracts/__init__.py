"""Switchyard's shared contracts: the names, types and errors that every part agrees on.

The engines (MLX), the gateway (HTTP, routing), the classifier and the benchmarks all import these,
and this package imports none of them, nor MLX: it is the neutral ground between the rooms
(docs/architecture.md).
"""
