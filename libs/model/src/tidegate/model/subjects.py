"""Subject names of the bus, in one place (see docs/events.md).

Subject tokens cannot hold ``.``, spaces, ``*`` or ``>``; Kubernetes node names often hold dots.
:func:`token` escapes such characters as ``%XX`` (uppercase hex), so ``ip-10-0-0-1.ec2.internal``
becomes ``ip-10-0-0-1%2Eec2%2Einternal``; :func:`untoken` reverses it.
"""

import re
from typing import Final, Literal

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_\-:]")
_ESCAPED: Final = re.compile(r"%([0-9A-F]{2})")
_CLUSTER: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

DecisionKind = Literal[
    "admitted",
    "pending",
    "preempt-requested",
    "preempted",
    "released",
    "replace-requested",
    "reserved",
    "reservation-dropped",
]


def token(text: str) -> str:
    """Escape ``text`` so it is exactly one subject token."""
    return _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), text)


def untoken(text: str) -> str:
    """Reverse :func:`token`."""
    return _ESCAPED.sub(
        lambda m: chr(int(m.group(1), 16)) if int(m.group(1), 16) < 128 else m.group(), text
    )


def validate_cluster(cluster: str) -> str:
    """Return ``cluster`` if it is a valid cluster id (a DNS label), else raise ValueError."""
    if not _CLUSTER.match(cluster):
        raise ValueError(
            f"cluster id {cluster!r} must be a DNS label: lowercase letters, digits and '-'"
        )
    return cluster


def node(cluster: str, name: str) -> str:
    """State subject of a node."""
    return f"tg.{cluster}.node.{token(name)}"


def pod(cluster: str, namespace: str, name: str) -> str:
    """State subject of a pod."""
    return f"tg.{cluster}.pod.{token(namespace)}.{token(name)}"


def workload(cluster: str, namespace: str, name: str) -> str:
    """State subject of a workload."""
    return f"tg.{cluster}.workload.{token(namespace)}.{token(name)}"


def topology(cluster: str, name: str) -> str:
    """State subject of a Topology."""
    return f"tg.{cluster}.config.topology.{token(name)}"


def queue(cluster: str, name: str) -> str:
    """State subject of a Queue."""
    return f"tg.{cluster}.config.queue.{token(name)}"


def cohort(cluster: str, name: str) -> str:
    """State subject of a Cohort (an inner node of a queue tree)."""
    return f"tg.{cluster}.config.cohort.{token(name)}"


def disruption_budget(cluster: str, namespace: str, name: str) -> str:
    """State subject of a PodDisruptionBudget."""
    return f"tg.{cluster}.config.pdb.{token(namespace)}.{token(name)}"


def capacity_node(cluster: str, topology_name: str, node_name: str) -> str:
    """Capacity subject of one node in one topology."""
    return f"tg.{cluster}.capacity.{token(topology_name)}.node.{token(node_name)}"


def capacity_domain(cluster: str, topology_name: str, level_index: int, values: list[str]) -> str:
    """Capacity subject of one domain (level index, then its values widest first)."""
    path = ".".join(token(v) for v in values)
    return f"tg.{cluster}.capacity.{token(topology_name)}.domain.{level_index}.{path}"


def decision(cluster: str, kind: DecisionKind, namespace: str, name: str) -> str:
    """Subject of a decision about a workload."""
    return f"tg.{cluster}.decision.{kind}.{token(namespace)}.{token(name)}"


def state_wildcards(cluster: str) -> list[str]:
    """Subjects of the last-value state stream."""
    return [
        f"tg.{cluster}.node.>",
        f"tg.{cluster}.pod.>",
        f"tg.{cluster}.workload.>",
        f"tg.{cluster}.config.>",
    ]


def capacity_wildcard(cluster: str) -> str:
    """Subjects of the last-value capacity stream."""
    return f"tg.{cluster}.capacity.>"


def capacity_nodes_wildcard(cluster: str) -> str:
    """The capacity stream's per-node subjects only (every topology; no domain aggregates)."""
    return f"tg.{cluster}.capacity.*.node.>"


def decision_wildcard(cluster: str) -> str:
    """Subjects of the append-only decision stream."""
    return f"tg.{cluster}.decision.>"


def decisions_of(cluster: str, namespace: str, name: str) -> str:
    """The subjects of every decision about one workload (any kind)."""
    return f"tg.{cluster}.decision.*.{token(namespace)}.{token(name)}"


def decision_workload(subject: str) -> tuple[str, str] | None:
    """Namespace and name of the workload a decision subject is about (None: not one)."""
    parts = subject.split(".")
    if len(parts) != 6 or parts[0] != "tg" or parts[2] != "decision":
        return None
    return untoken(parts[4]), untoken(parts[5])
