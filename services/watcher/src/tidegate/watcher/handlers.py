"""The watcher's one handler: fold a Kubernetes watch event into the index.

Short on purpose (STYLE.md 3): the index decides what changed; the handler only logs what could
not be read, so a malformed object is reported and skipped and never stops the watcher.
"""

import logging
from collections.abc import Mapping

from tidegate.kube.read.index import ClusterIndex, EventType, ObjectKind, StateKey

log = logging.getLogger(__name__)


def fold(
    index: ClusterIndex, kind: ObjectKind, event: EventType, obj: Mapping[str, object]
) -> set[StateKey]:
    """Apply one event; return the state keys whose message may have changed."""
    applied = index.apply(kind, event, obj)
    for problem in applied.problems:
        log.warning("ignored %s event: %s", event, problem, extra={"kind": kind})
    return applied.affected
