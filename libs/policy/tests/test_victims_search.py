"""Property and table tests of the victim-set searches against brute force over all subsets."""

from collections.abc import Sequence
from itertools import combinations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.policy.preempt_search import (
    Candidate,
    PodFitProblem,
    score_of,
    search_pod_fit,
    search_with_oracle,
)


def brute_fits(problem: PodFitProblem, victims: Sequence[int]) -> bool:
    """Reference: does the podset fit in some domain once ``victims`` are evicted?"""
    per_domain = [0] * problem.domains
    for node in range(problem.free.shape[0]):
        room = [int(x) for x in problem.free[node]]
        for i in victims:
            for r, amount in enumerate(problem.candidates[i].freed.get(node, ())):
                room[r] += amount
        pods = min(amount // need for amount, need in zip(room, problem.request, strict=True))
        per_domain[int(problem.domain_of[node])] += max(pods, 0)
    return max(per_domain, default=0) >= problem.count


def brute_best(problem: PodFitProblem) -> tuple[int, int, int, int] | None:
    """Reference: the best objective over every subset of candidates that fits."""
    everyone = range(len(problem.candidates))
    scores = [
        score_of(problem.candidates, subset)
        for size in range(len(problem.candidates) + 1)
        for subset in combinations(everyone, size)
        if brute_fits(problem, subset)
    ]
    return min(scores) if scores else None


@st.composite
def problems(draw: st.DrawFn) -> PodFitProblem:
    nodes = draw(st.integers(1, 7))
    resources = draw(st.integers(1, 2))
    domains = draw(st.integers(1, 3))
    free = np.array(
        [[draw(st.integers(-1, 2)) for _ in range(resources)] for _ in range(nodes)],
        dtype=np.int64,
    )
    domain_of = np.array([draw(st.integers(0, domains - 1)) for _ in range(nodes)], dtype=np.int64)
    candidates = []
    for _ in range(draw(st.integers(0, 9))):
        touched = draw(st.sets(st.integers(0, nodes - 1), max_size=3))
        freed = {
            n: tuple(draw(st.integers(0, 4)) for _ in range(resources)) for n in sorted(touched)
        }
        candidates.append(
            Candidate(
                priority=draw(st.sampled_from([10, 20, 30])),
                cost=draw(st.integers(0, 6)),
                gpus=draw(st.integers(0, 3)),
                freed=freed,
            )
        )
    return PodFitProblem(
        free=free,
        request=tuple(draw(st.integers(1, 3)) for _ in range(resources)),
        count=draw(st.integers(1, 8)),
        domain_of=domain_of,
        domains=domains,
        candidates=candidates,
    )


@settings(max_examples=400, deadline=None)
@given(problems())
def test_pod_fit_search_is_optimal_and_minimal(problem: PodFitProblem) -> None:
    outcome = search_pod_fit(problem)
    best = brute_best(problem)
    assert outcome.exact
    if best is None:
        assert outcome.victims is None
        return
    assert outcome.victims is not None
    assert brute_fits(problem, outcome.victims)
    assert score_of(problem.candidates, outcome.victims) == best
    for victim in outcome.victims:  # minimal: every victim is needed
        assert not brute_fits(problem, [v for v in outcome.victims if v != victim])


@settings(max_examples=200, deadline=None)
@given(problems())
def test_oracle_search_is_optimal_and_minimal(problem: PodFitProblem) -> None:
    outcome = search_with_oracle(
        problem.candidates, lambda victims: brute_fits(problem, sorted(victims)), call_budget=10_000
    )
    best = brute_best(problem)
    assert outcome.exact
    if best is None:
        assert outcome.victims is None
        return
    assert outcome.victims is not None
    assert score_of(problem.candidates, outcome.victims) == best
    for victim in outcome.victims:
        assert not brute_fits(problem, [v for v in outcome.victims if v != victim])


def two_racks(candidates: list[Candidate], *, count: int) -> PodFitProblem:
    """Four full 8-GPU nodes, two per rack; one resource (GPUs), pods of 4 GPUs."""
    return PodFitProblem(
        free=np.zeros((4, 1), dtype=np.int64),
        request=(4,),
        count=count,
        domain_of=np.array([0, 0, 1, 1], dtype=np.int64),
        domains=2,
        candidates=candidates,
    )


def test_lowest_priority_band_wins_over_fewer_victims() -> None:
    candidates = [
        Candidate(priority=40, cost=0, gpus=16, freed={0: (8,), 1: (8,)}),  # one gang, rack 0
        Candidate(priority=20, cost=0, gpus=8, freed={2: (8,)}),  # two gangs, rack 1
        Candidate(priority=20, cost=0, gpus=8, freed={3: (8,)}),
    ]
    outcome = search_pod_fit(two_racks(candidates, count=4))
    assert outcome.victims == (1, 2)
    assert outcome.domain == 1


def test_fewer_victims_then_less_gpu_time() -> None:
    candidates = [
        Candidate(priority=20, cost=500, gpus=16, freed={0: (8,), 1: (8,)}),
        Candidate(priority=20, cost=100, gpus=8, freed={2: (8,)}),
        Candidate(priority=20, cost=100, gpus=8, freed={3: (8,)}),
        Candidate(priority=20, cost=300, gpus=16, freed={2: (8,), 3: (8,)}),
    ]
    outcome = search_pod_fit(two_racks(candidates, count=4))
    assert outcome.victims == (3,)  # one victim beats two; 300 GPU-s beats 500


def test_free_room_first_and_no_victim_when_it_fits() -> None:
    problem = two_racks([Candidate(priority=20, cost=0, gpus=8, freed={0: (8,)})], count=2)
    problem = PodFitProblem(
        free=np.array([[0], [0], [8], [0]], dtype=np.int64),
        request=problem.request,
        count=2,
        domain_of=problem.domain_of,
        domains=2,
        candidates=problem.candidates,
    )
    assert search_pod_fit(problem).victims == ()
    wider = PodFitProblem(
        free=problem.free,
        request=(4,),
        count=4,
        domain_of=problem.domain_of,
        domains=2,
        candidates=[
            Candidate(priority=20, cost=0, gpus=8, freed={0: (8,)}),
            Candidate(priority=20, cost=0, gpus=8, freed={3: (8,)}),
        ],
    )
    # Rack 1 has a free node: one victim there is enough, where rack 0 would need more.
    assert search_pod_fit(wider).victims == (1,)


def test_impossible_reports_the_best_domain() -> None:
    candidates = [Candidate(priority=20, cost=0, gpus=8, freed={0: (8,)})]
    outcome = search_pod_fit(two_racks(candidates, count=3))
    assert outcome.victims is None
    assert outcome.best_pods == 2


def test_budget_exhaustion_keeps_a_minimal_set() -> None:
    # Six pods of 4 GPUs. Greedy takes A (4 pods) then B: two victims, weight 101. The lightest
    # pair is B + C; finding it takes search steps.
    candidates = [
        Candidate(priority=20, cost=100, gpus=0, freed={0: (16,)}),  # A
        Candidate(priority=20, cost=1, gpus=0, freed={1: (12,)}),  # B
        Candidate(priority=20, cost=1, gpus=0, freed={2: (12,)}),  # C
        Candidate(priority=20, cost=1, gpus=0, freed={3: (8,)}),  # D
    ]
    problem = PodFitProblem(
        free=np.zeros((4, 1), dtype=np.int64),
        request=(4,),
        count=6,
        domain_of=np.zeros(4, dtype=np.int64),
        domains=1,
        candidates=candidates,
    )
    tight = search_pod_fit(problem, step_budget=0)
    assert not tight.exact
    assert tight.victims == (0, 1)
    assert all(not brute_fits(problem, [v]) for v in tight.victims)  # still minimal
    full = search_pod_fit(problem)
    assert full.exact
    assert full.victims == (1, 2)
