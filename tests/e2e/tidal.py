"""The tidal scenario the end-to-end and chaos tests play: an online queue whose inference
Deployments may reclaim from an offline queue's rack-bound training Jobs (8-GPU pods)."""

from typing import Final

from tidegate.cli.demo_trace import QueueEntry, WorkloadEntry

RACK: Final = "tidegate.io/rack"
QUEUES: Final = [
    QueueEntry(name="online", spec={"priority": 100, "reclaimable": False}),
    QueueEntry(name="offline", spec={"priority": 10, "reclaimable": True}),
]
PRIORITY_CLASSES: Final = {"serving": 100_000, "batch": 10_000}


def training(name: str, *, pods: int, duration: float | None, cpu: str = "8") -> WorkloadEntry:
    """A training Job of ``pods`` 8-GPU pods in the offline queue, all required in one rack
    (``duration`` None: it runs until deleted)."""
    return WorkloadEntry(
        name=name,
        queue="offline",
        priority_class="batch",
        pods=pods,
        requests={"cpu": cpu, "nvidia.com/gpu": 8},
        duration=duration,
        annotations={"tidegate.io/topology-required": RACK},
    )


def inference(name: str, *, pods: int, cpu: str = "8") -> WorkloadEntry:
    """An inference Deployment of ``pods`` 8-GPU pods in the online queue."""
    return WorkloadEntry(
        name=name,
        kind="Deployment",
        queue="online",
        priority_class="serving",
        pods=pods,
        requests={"cpu": cpu, "nvidia.com/gpu": 8},
        annotations={"volcano.sh/service.type": "inference"},
    )
