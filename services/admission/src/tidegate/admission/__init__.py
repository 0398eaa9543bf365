"""The admission service: decides which workloads are admitted, where, and why others wait.

It is thin wiring (STYLE.md 3): :mod:`.handlers` feed bus messages into the pure policy
:class:`tidegate.policy.admission.Admission`, :mod:`.app` runs the leader lease and the
decision loop and commits decisions to the ledger (:mod:`.ledger`) and the bus. Settings are in
:mod:`.config`; the user's documentation is docs/admission.md and docs/queues.md.
"""
