"""A simulated Kubernetes cluster that speaks the Kubernetes HTTP API.

The API server (aiohttp on loopback) behaves like the kube-apiserver for the subset tidegate
uses, and a simulated control plane (scheduler, kubelet, Job/Deployment controllers) makes
pods run. Entry point: ``async with SimCluster.running(SimSettings(...)) as sim``. See
docs/simulator.md for what is and is not simulated.
"""

from tidegate.sim.cluster import SimCluster
from tidegate.sim.settings import SettingsError, SimSettings
from tidegate.sim.topology import TopologyError

__all__ = ["SettingsError", "SimCluster", "SimSettings", "TopologyError"]
