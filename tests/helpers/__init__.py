"""What several test packages share: the config service run for real (a live server on a free
loopback port, seeded stores, the `octune` command), and the farm's agents as processes.
"""
