"""Where trials run besides this machine: `ray.py` runs each trial as a Ray task on a cluster's nodes,
`placement.py` holds the pure rules of what a trial asks of the cluster. The local executor is
`core/executor.py`; the composition root picks one."""
