"""The kernel catalogue: what may be tuned. Families (a problem, its shapes and its reference),
the registry of their kernels, search spaces with their schema, enumeration and expressions,
and the device limits spaces are written against. Below the tuning engine (``octune.tuner``),
which measures what the catalogue describes; it imports only ``octune.core``.
"""
