"""bench/admission_cohorts.py builds Kueue's TAS scenario as the admission policy sees it, and
its cycles decide every workload (at a tiny scale; the benchmark itself is not run here)."""

import argparse

from tidegate.testing.bench import load_script

ac = load_script("admission_cohorts.py", "admission_cohorts_bench")


def test_the_tas_scenario_is_built_with_its_queues_nodes_and_policies() -> None:
    scenario = ac.load_scenario(ac.DATA / "tas" / "generator.yaml")
    admission, jobs = ac.admission_for(scenario, 0.01)
    queues = admission.queues()
    assert len(queues) == 30
    one = next(iter(queues.values()))
    assert (one.nominal, one.borrowing_limit, one.quota) == (
        {"cpu": 20_000},
        {"cpu": 100_000},
        {"cpu": 120_000},
    )
    assert one.preemption.reclaim_within_cohort == "Any"
    assert one.preemption.within_cluster_queue == "LowerPriority"
    assert admission.capacity.nodes(one.topology) == 640
    assert {ac.workload(job, 0).podsets[0].topology.required for job in jobs} >= {
        "cloud.provider.com/topology-rack"
    }


def test_every_workload_is_decided_and_nothing_changes_in_an_idle_cycle() -> None:
    figures = ac.run(argparse.Namespace(scenario="tas", config=None, scale=0.01))
    assert figures["arrival_decisions"] > 0
    assert figures["idle_decisions"] == 0
    assert figures["workloads"] == 9 * 30
