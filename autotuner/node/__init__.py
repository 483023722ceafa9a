"""The machine's resources: the device pool and its leases, worker processes, the host fingerprint."""
