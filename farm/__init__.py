"""The tuning farm: jobs submitted to a config server, and agents that lease and tune them."""
