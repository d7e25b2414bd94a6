"""Firmware bundles: what a device carries offline (JSON, SQLite or a C header), their export,
import, signatures, and the commands for them.
"""
