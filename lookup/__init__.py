"""Lookup semantics, one home for the service and the bundles: exact, nearest legal, predicted,
default; the tables they answer from, built from a store; the cost model's answers.
"""
