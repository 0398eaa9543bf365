"""Every label and annotation key tidegate understands, in one place.

tidegate reads its own keys and those of Kueue, KAI-Scheduler and Volcano, so workloads written
for those systems run unchanged (docs/workloads.md lists them with examples). Where two families
name the same setting, the tuples below give the order in which they are consulted: tidegate's
own key first, then Kueue's current one, Kueue's older one, KAI's, Volcano's.

This module holds names only; parsing is in :mod:`tidegate.kube.read.annotations`.
"""

from typing import Final

# --------------------------------------------------------------------------- tidegate's own
TG_QUEUE: Final = "tidegate.io/queue"
TG_TOPOLOGY: Final = "tidegate.io/topology"
TG_TOPOLOGY_REQUIRED: Final = "tidegate.io/topology-required"
TG_TOPOLOGY_PREFERRED: Final = "tidegate.io/topology-preferred"
TG_SLICE_SIZE: Final = "tidegate.io/slice-size"
TG_SLICE_TOPOLOGY: Final = "tidegate.io/slice-topology"
TG_PLACEMENT_PROFILE: Final = "tidegate.io/placement-profile"
TG_ON_PREEMPTION: Final = "tidegate.io/on-preemption"
TG_POD_INDEX: Final = "tidegate.io/pod-index"
"""Label (or annotation) giving a PodGroup member's rank."""
TG_ROLE: Final = "tidegate.io/role"
"""Label naming the podset (role) of a PodGroup member, e.g. "leader" or "worker"."""
TG_TRACEPARENT: Final = "tidegate.io/traceparent"
TG_TRACESTATE: Final = "tidegate.io/tracestate"

# --------------------------------------------------------------------------- Kueue
KUEUE_QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
KUEUE_PODSET_REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PODSET_PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_PODSET_UNCONSTRAINED: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_PODSET_SLICE_REQUIRED: Final = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_PODSET_SLICE_SIZE: Final = "kueue.x-k8s.io/podset-slice-size"
KUEUE_PODSET_GROUP_NAME: Final = "kueue.x-k8s.io/podset-group-name"
KUEUE_REQUIRE_TOPOLOGY: Final = "kueue.x-k8s.io/require-topology"
"""The KEP's first revision (seed 000); still accepted."""
KUEUE_PREFER_TOPOLOGY: Final = "kueue.x-k8s.io/prefer-topology"
"""The KEP's first revision (seed 000); still accepted, including "auto"."""

# --------------------------------------------------------------------------- KAI-Scheduler
KAI_QUEUE: Final = "kai.scheduler/queue"
"""Label naming a workload's KAI queue."""
KAI_TOPOLOGY: Final = "kai.scheduler/topology"
KAI_REQUIRED: Final = "kai.scheduler/topology-required-placement"
KAI_PREFERRED: Final = "kai.scheduler/topology-preferred-placement"

# --------------------------------------------------------------------------- Volcano
VOLCANO_QUEUE_NAME: Final = "scheduling.volcano.sh/queue-name"
VOLCANO_SERVICE_TYPE: Final = "volcano.sh/service.type"
VOLCANO_PREEMPTABLE: Final = "volcano.sh/preemptable"
VOLCANO_CARD_REQUEST: Final = "volcano.sh/card.request"
VOLCANO_CARD_NAME: Final = "volcano.sh/card.name"
VOLCANO_CARD_QUOTA: Final = "volcano.sh/card.quota"
"""On a Queue: card quota as JSON, used when the Queue has no ``spec.cardQuota``."""

# --------------------------------------------------------------------------- group membership
POD_GROUP_KEYS: Final = ("scheduling.k8s.io/group-name", "scheduling.x-k8s.io/pod-group")
"""Label or annotation naming the PodGroup (same namespace) a pod belongs to."""

# --------------------------------------------------------------------------- Kubernetes
JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
JOBSET_JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
JOBSET_REPLICATED_JOB_NAME: Final = "jobset.sigs.k8s.io/replicatedjob-name"
POD_TEMPLATE_HASH: Final = "pod-template-hash"

# --------------------------------------------------------------------------- precedence
QUEUE_KEYS: Final = (TG_QUEUE, KUEUE_QUEUE_NAME, KAI_QUEUE, VOLCANO_QUEUE_NAME)
TOPOLOGY_NAME_KEYS: Final = (TG_TOPOLOGY, KAI_TOPOLOGY)
REQUIRED_KEYS: Final = (
    TG_TOPOLOGY_REQUIRED,
    KUEUE_PODSET_REQUIRED,
    KUEUE_REQUIRE_TOPOLOGY,
    KAI_REQUIRED,
)
PREFERRED_KEYS: Final = (
    TG_TOPOLOGY_PREFERRED,
    KUEUE_PODSET_PREFERRED,
    KUEUE_PREFER_TOPOLOGY,
    KAI_PREFERRED,
)
SLICE_SIZE_KEYS: Final = (TG_SLICE_SIZE, KUEUE_PODSET_SLICE_SIZE)
SLICE_TOPOLOGY_KEYS: Final = (TG_SLICE_TOPOLOGY, KUEUE_PODSET_SLICE_REQUIRED)

MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
"""On a mirror pod (a static pod's API object): never sent to the webhook, never tidegate's."""
