"""The decisions in force with the nodes beside them: what the ungater releases pods from.

:class:`ClusterView` is the :class:`~tidegate.model.replica.Replica` (workloads, pods and the
decisions in force, the one rule every service reads) plus the nodes, indexed by topology
domain, and the nodes deleted since start (to name them when their slots are lost). It is fed
bus message bodies, as the replica is, and says which workloads each message may affect; it
keeps no rule of its own about decisions and does no I/O.
"""

from collections.abc import Iterable, Sequence
from typing import Final

from tidegate.model import Admitted, Message, NodeState, PodState, Tombstone, WorkloadKey
from tidegate.model.replica import Replica, Verdict

DEPARTED_KEPT: Final = 4096
"""Deleted nodes remembered (the newest), to name them when their slots are lost."""


class ClusterView:
    """The replica of the decisions in force, and the nodes (module docstring)."""

    def __init__(self) -> None:
        """Start empty."""
        self.replica = Replica()
        self.nodes: dict[str, NodeState] = {}
        self.departed: dict[str, NodeState] = {}
        """The last state of nodes deleted since start (the newest :data:`DEPARTED_KEPT`)."""
        self._domains: dict[tuple[str, ...], dict[tuple[str, ...], list[NodeState]]] = {}

    def apply(
        self, body: Message, *, stream_sequence: int = 0, time: float = 0.0
    ) -> set[WorkloadKey]:
        """Apply one message; return the workloads it may affect (a node that changed
        readiness or labels, or went, affects every workload with an admission)."""
        match body:
            case NodeState():
                self.departed.pop(body.name, None)
                before = self.nodes.get(body.name)
                self.nodes[body.name] = body
                if before is None or before.ready != body.ready or before.labels != body.labels:
                    return self._node_changed()
                return set()
            case Tombstone(object_kind="node", name=name):
                gone = self.nodes.pop(name, None)
                if gone is None:
                    return set()
                self.departed[name] = gone
                while len(self.departed) > DEPARTED_KEPT:
                    del self.departed[next(iter(self.departed))]
                return self._node_changed()
            case Tombstone(object_kind="workload", namespace=str(namespace), name=name):
                touched = self.replica.apply(body, stream_sequence=stream_sequence, time=time)
                self.replica.forget(WorkloadKey(f"{namespace}/{name}"))
                return touched
            case Tombstone(object_kind="pod"):
                touched = self.replica.apply(body, stream_sequence=stream_sequence, time=time)
                for key in touched:
                    if self.replica.workload(key) is None:
                        self.replica.forget(key)  # its last pod went after the workload
                return touched
            case _:
                return self.replica.apply(body, stream_sequence=stream_sequence, time=time)

    # ------------------------------------------------------------------ queries

    def verdict(self, key: WorkloadKey) -> Verdict:
        """The decisions in force about ``key`` (:meth:`Replica.verdict`)."""
        return self.replica.verdict(key)

    def admission(self, key: WorkloadKey) -> Admitted | None:
        """The admission in force for ``key``."""
        return self.replica.in_force(key)

    def admitted_keys(self) -> list[WorkloadKey]:
        """Workloads whose current object has an admission on record (in force or not)."""
        return [key for key in self.replica.recorded() if self.replica.verdict(key).latest]

    def members(self, key: WorkloadKey) -> list[PodState]:
        """The workload's pods, by name."""
        return self.replica.members(key)

    def member_count(self, key: WorkloadKey) -> int:
        """How many pods the workload has."""
        return self.replica.member_count(key)

    def node_ready(self, name: str | None) -> bool:
        """Whether a pod on node ``name`` is on a usable node (unbound pods are)."""
        if name is None:
            return True
        node = self.nodes.get(name)
        return node is not None and node.ready

    def nodes_matching(
        self, levels: Sequence[str], values: Sequence[str], *, departed: bool = False
    ) -> list[NodeState]:
        """Nodes whose labels put them in the domain ``values`` of ``levels`` (with
        ``departed``, deleted ones too). Indexed per list of levels, so a call costs no scan
        of the cluster's nodes (rebuilt after a node changes)."""
        key = tuple(levels)
        index = self._domains.get(key)
        if index is None:
            index = self._domains[key] = _domain_index(key, self.nodes.values())
        found = list(index.get(tuple(values), ()))
        if departed:
            found.extend(_domain_index(key, self.departed.values()).get(tuple(values), ()))
        return found

    def _node_changed(self) -> set[WorkloadKey]:
        self._domains.clear()
        # Any admitted workload may have a slot on the node (its domain may have died or
        # come back): let each reconcile; a reconcile with nothing to do is cheap.
        return set(self.admitted_keys())


def _domain_index(
    levels: tuple[str, ...], nodes: Iterable[NodeState]
) -> dict[tuple[str, ...], list[NodeState]]:
    """Domain (values of the first k levels, for every k) → its nodes."""
    index: dict[tuple[str, ...], list[NodeState]] = {}
    for node in nodes:
        path: list[str] = []
        for level in levels:
            value = node.labels.get(level)
            if value is None:
                break
            path.append(value)
            index.setdefault(tuple(path), []).append(node)
    return index
