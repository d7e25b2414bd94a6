"""The bottom layer: what every other package may use and which uses nothing of octune.

Standard library only: user-facing errors, the whitelisted expression language of launch sizes
and shape rules, and what a kernel family's problem is. The lookup that bundles carry onto
devices imports these and nothing heavier.
"""
