"""The topology-cache service: free capacity per node and per topology domain, on the bus.

It is thin wiring (STYLE.md 3): :mod:`.handlers` feed the state stream (nodes, pods,
workloads, Topologies) and the admitted / released / preempted decisions into the pure
:class:`tidegate.placement.accounting.CapacityAccounting`;
:mod:`tidegate.policy.capacity_stream` decides which capacity records to publish (deltas,
compared with what the capacity stream holds); :mod:`.app` runs the followers and the
publishing loop. Settings are in :mod:`.config`; the user's documentation is
docs/topology-cache.md.
"""
