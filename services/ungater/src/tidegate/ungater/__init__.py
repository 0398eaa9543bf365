"""The ungater service: holds managed pods at creation, releases them onto their assigned
domains, and reports what happened to users.

- :mod:`.webhook` — the mutating webhook that adds the scheduling gate
  ``tidegate.io/admission`` to new pods that belong to tidegate (the decision is
  :mod:`tidegate.kube.read.gate`);
- :mod:`.releaser` — release rounds: carries out what :mod:`tidegate.policy.release` plans
  (releases with expectations, replacement requests, evictions, re-queues, resumes, PodGroup
  status: :mod:`tidegate.policy.podgroup`);
- :mod:`.queue_status` — writes Queue status (:mod:`tidegate.policy.queue_status`);
- :mod:`.handlers` — Events and the trace annotation from decisions;
- :mod:`.app` and :mod:`.config` — wiring and settings.

It decides nothing about admission or placement: it carries out admission's decisions on the
pods. The user's documentation is docs/ungater.md.
"""
