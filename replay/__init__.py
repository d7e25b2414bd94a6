"""Strategies replayed over recorded measurements, without a device: how search strategies are
compared offline.
"""
