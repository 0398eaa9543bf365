"""The preemption service: evicts whole training gangs so that inference can run (tidal reclaim).

Thin wiring (STYLE.md 3): :mod:`.handlers` feed bus messages into the pure
:class:`~tidegate.preemption.view.PreemptionView`; :mod:`.preempter` answers each
``preempt-requested`` decision with the victim search of :mod:`tidegate.policy.victims`,
commits the preemption to the ledger (:mod:`.ledger`, :mod:`.record`) before evicting anything
(:mod:`.evict`), and publishes the ``preempted`` decision; :mod:`.app` runs the leader lease,
the consumer and the reconcile loop. Settings are in :mod:`.config`; the user's documentation
is docs/preemption-service.md. It never chooses victims itself and never admits anything.
"""
