"""The ungater service: holds managed pods at creation, releases them onto their assigned
domains, and reports what happened to users.

- :mod:`.gate` and :mod:`.webhook` — the mutating webhook that adds the scheduling gate
  ``tidegate.io/admission`` to new pods that belong to tidegate;
- :mod:`.view` — pods, nodes, workloads and admission's decisions, rebuilt from the bus;
- :mod:`.slots` — which gated pod goes into which slot of a TopologyAssignment (pure);
- :mod:`.releaser` — release rounds with expectations, replacement requests after node
  failures, evictions, PodGroup status;
- :mod:`.status` — PodGroup phase, counters and conditions, Event messages (pure);
- :mod:`.handlers` — Events and the trace annotation from decisions;
- :mod:`.app` and :mod:`.config` — wiring and settings.

It decides nothing about admission or placement: it carries out admission's decisions on the
pods. The user's documentation is docs/ungater.md.
"""
