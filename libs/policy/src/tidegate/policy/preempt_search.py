"""The combinatorial heart of victim selection: which gangs to evict so a gang fits.

Given the free room of the nodes an incoming gang may use and, for every candidate victim, the
room its eviction would free on each of those nodes, find the set of candidates whose eviction
lets the gang be placed and that minimises, in this order:

1. the highest priority among the victims,
2. the number of victims,
3. the GPU-seconds lost (see :mod:`tidegate.policy.victims` for the definition),
4. the GPUs evicted (a tie-break when running times are unknown),

then, for determinism, the earliest candidates in the caller's order. Such an optimum is always
*minimal*: dropping any victim leaves the gang unplaceable (else the smaller set would be better
on criterion 2).

Two searches share that objective:

- :func:`search_pod_fit` for one podset of identical pods, all inside one domain of a level (or
  anywhere). Whether they fit is then a sum over nodes of ``min_r floor(free_r / request_r)``,
  which changes only on the nodes a victim touches, so the search updates it incrementally in
  plain Python. A greedy set (pruned to minimal, then improved by swapping victims for lighter
  ones) gives an incumbent; per-domain branch and bound with valid bounds makes it exact; a
  budget of search steps caps the worst case, after which it returns the best set found (still
  minimal) and says it is not proven optimal.
- :func:`search_with_oracle` for everything else (several podsets, groups, slices): the caller
  supplies ``fits(victims)`` (the placement engine on a copied view) and the search calls it
  within a budget of calls.

Nothing here knows about Kubernetes, queues or placement; :mod:`tidegate.policy.victims` builds
these problems from workloads and the capacity view, and places the gang for real at the end.
"""

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Final

import numpy as np
import numpy.typing as npt

Vector = tuple[int, ...]
"""Amounts of the podset's requested resources, in the order of :attr:`PodFitProblem.request`."""

DEFAULT_STEP_BUDGET: Final = 20_000
"""Branch-and-bound steps (victims tried) before :func:`search_pod_fit` settles for its best."""

DEFAULT_ORACLE_BUDGET: Final = 300
"""Oracle calls before :func:`search_with_oracle` settles for its best."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A gang that may be evicted, reduced to what the search needs."""

    priority: int
    cost: int
    """GPU-seconds lost if evicted (criterion 3)."""
    gpus: int
    """GPUs (cards) it holds (criterion 4)."""
    freed: Mapping[int, Vector] = field(default_factory=dict)
    """Node index → room its eviction frees there; only nodes the incoming gang may use."""


@dataclass(frozen=True, slots=True)
class PodFitProblem:
    """One podset of ``count`` identical pods that must fit inside one domain.

    ``free`` holds, per node the podset may use, the free room of each requested resource
    (negative when a node is overcommitted); ``domain_of`` gives each node's domain index at the
    required level (all zeros when the podset may spread over every node).
    """

    free: npt.NDArray[np.int64]
    """Shape (nodes, resources)."""
    request: Vector
    """Per-pod amount of each resource, all positive."""
    count: int
    domain_of: npt.NDArray[np.int64]
    """Shape (nodes,): domain index of each node."""
    domains: int
    """Number of domains (``domain_of`` values are below it)."""
    candidates: Sequence[Candidate]


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """What a search found."""

    victims: tuple[int, ...] | None
    """Indices into the candidates, ascending; () when the gang fits in free room; None when
    no allowed set of victims makes it fit."""
    exact: bool
    """True when the set is proven optimal (the search finished within its budget)."""
    domain: int | None = None
    """The domain the gang fits into after eviction (:func:`search_pod_fit` only)."""
    best_pods: int = 0
    """When it does not fit: most pods of the podset that fit in one domain after evicting
    every candidate (:func:`search_pod_fit` only)."""
    steps: int = 0
    """Search steps (or oracle calls) used."""


@dataclass(frozen=True, slots=True, order=True)
class _Score:
    """The objective, compared lexicographically (smaller is better)."""

    top_priority: int
    count: int
    weight: int
    """GPU-seconds and GPUs combined so that comparing it compares them lexicographically."""
    indices: tuple[int, ...]


def _weights(candidates: Sequence[Candidate]) -> list[int]:
    scale = sum(c.gpus for c in candidates) + 1
    return [c.cost * scale + c.gpus for c in candidates]


def score_of(candidates: Sequence[Candidate], victims: Sequence[int]) -> tuple[int, int, int, int]:
    """The objective of a victim set: (top priority, victims, GPU-seconds, GPUs).

    An empty set scores below every other set (its top priority is taken as the lowest int64).
    """
    if not victims:
        return (np.iinfo(np.int64).min, 0, 0, 0)
    chosen = [candidates[i] for i in victims]
    return (
        max(c.priority for c in chosen),
        len(chosen),
        sum(c.cost for c in chosen),
        sum(c.gpus for c in chosen),
    )


# --------------------------------------------------------------------------- pod-count search


def _pods_per_node(free: npt.NDArray[np.int64], request: Vector) -> npt.NDArray[np.int64]:
    if free.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    per_resource: npt.NDArray[np.int64] = free // np.asarray(request, dtype=np.int64)
    fit: npt.NDArray[np.int64] = np.maximum(per_resource.min(axis=1), 0)
    return fit


def _pods(vector: Sequence[int], request: Vector) -> int:
    fit = min(amount // need for amount, need in zip(vector, request, strict=True))
    return fit if fit > 0 else 0


def _fraction(vector: Sequence[int], request: Vector) -> float:
    fit = min(amount / need for amount, need in zip(vector, request, strict=True))
    return fit if fit > 0 else 0.0


def _add(a: Sequence[int], b: Sequence[int]) -> Vector:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _domain_pods(problem: PodFitProblem, free: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    per_node = _pods_per_node(free, problem.request)
    return np.bincount(problem.domain_of, weights=per_node, minlength=problem.domains).astype(
        np.int64
    )


class _FreedTable:
    """Every (candidate, node, freed room) triple as flat arrays, to sum many at once."""

    def __init__(self, problem: PodFitProblem) -> None:
        owners: list[int] = []
        nodes: list[int] = []
        rows: list[Vector] = []
        for i, candidate in enumerate(problem.candidates):
            for node, vector in candidate.freed.items():
                owners.append(i)
                nodes.append(node)
                rows.append(vector)
        width = len(problem.request)
        self.shape = problem.free.shape
        self.owners = np.asarray(owners, dtype=np.int64)
        self.nodes = np.asarray(nodes, dtype=np.int64)
        self.rows = np.asarray(rows, dtype=np.int64).reshape(len(rows), width)

    def freed(self, members: Sequence[int]) -> npt.NDArray[np.int64]:
        """Room freed on every node by evicting all of ``members``."""
        total = np.zeros(self.shape, dtype=np.int64)
        chosen = np.isin(self.owners, np.asarray(members, dtype=np.int64))
        np.add.at(total, self.nodes[chosen], self.rows[chosen])
        return total


class _Domain:
    """Incremental pod count of one domain while victims are added and removed."""

    def __init__(
        self,
        problem: PodFitProblem,
        domain: int,
        members: Sequence[int],
        base_per_node: npt.NDArray[np.int64],
        all_per_node: npt.NDArray[np.int64],
    ) -> None:
        self.request = problem.request
        self.count = problem.count
        nodes = np.flatnonzero(problem.domain_of == domain)
        self.base_pods = int(base_per_node[nodes].sum())
        in_domain = {int(n) for n in nodes}
        self.freed: dict[int, list[tuple[int, Vector]]] = {}
        self.upper: dict[int, int] = {}
        """Candidate → bound on the pods its eviction can ever add here."""
        for i in members:
            touched = [(n, v) for n, v in problem.candidates[i].freed.items() if n in in_domain]
            bound = sum(int(all_per_node[n] - base_per_node[n]) for n, _ in touched)
            if bound > 0:
                self.freed[i] = touched
                self.upper[i] = bound
        self.room: dict[int, Vector] = {}
        self.fit: dict[int, int] = {}
        for i in self.freed:
            for n, _ in self.freed[i]:
                self.room[n] = tuple(int(x) for x in problem.free[n])
                self.fit[n] = int(base_per_node[n])
        self.pods = self.base_pods
        # A second, resource-wise bound. On the nodes that can gain pods at all, the pods that
        # fit never exceed (free room + freed room) / request, resource by resource, so the
        # freed volumes of the victims must cover what the gang needs beyond that free room.
        growing = [n for n in self.room if all_per_node[n] > base_per_node[n]]
        fixed = self.base_pods - sum(int(base_per_node[n]) for n in growing)
        free_room = np.maximum(problem.free[growing], 0).sum(axis=0) if growing else None
        self.shortfall: Vector = tuple(
            (self.count - fixed) * need - (int(free_room[r]) if free_room is not None else 0)
            for r, need in enumerate(self.request)
        )
        """Per resource: room the victims must free on growing nodes for the gang to fit."""
        keep = set(growing)
        self.volume: dict[int, Vector] = {
            i: tuple(
                sum(vector[r] for n, vector in touched if n in keep)
                for r in range(len(self.request))
            )
            for i, touched in self.freed.items()
        }
        """Candidate → room it frees on growing nodes, per resource."""

    def gain(self, i: int) -> tuple[int, float]:
        """Pods (and fractional pods) that evicting ``i`` would add now."""
        pods = 0
        fraction = 0.0
        for n, vector in self.freed[i]:
            after = _add(self.room[n], vector)
            pods += _pods(after, self.request) - self.fit[n]
            fraction += _fraction(after, self.request) - _fraction(self.room[n], self.request)
        return pods, fraction

    def add(self, i: int) -> None:
        """Evict ``i``."""
        for n, vector in self.freed[i]:
            after = _add(self.room[n], vector)
            fit = _pods(after, self.request)
            self.pods += fit - self.fit[n]
            self.room[n] = after
            self.fit[n] = fit

    def remove(self, i: int) -> None:
        """Undo :meth:`add`."""
        for n, vector in self.freed[i]:
            after = tuple(x - y for x, y in zip(self.room[n], vector, strict=True))
            fit = _pods(after, self.request)
            self.pods += fit - self.fit[n]
            self.room[n] = after
            self.fit[n] = fit

    def fits(self) -> bool:
        """Whether the podset fits with the current evictions."""
        return self.pods >= self.count


class _OutOfStepsError(Exception):
    """The search used up its steps; the best set found so far stands."""


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps
        self.used = 0

    def spend(self) -> None:
        if self.left <= 0:
            raise _OutOfStepsError
        self.used += 1
        self.left -= 1


def _greedy(state: _Domain, weights: Sequence[int]) -> list[int]:
    """Add the most helpful victim until the podset fits, then drop every unneeded one."""
    chosen: list[int] = []
    remaining = sorted(state.freed)
    while not state.fits() and remaining:
        best = max(
            remaining,
            key=lambda i: (*state.gain(i), -weights[i], -i),
        )
        remaining.remove(best)
        state.add(best)
        chosen.append(best)
    if not state.fits():  # pragma: no cover - callers only pass domains that fit
        raise AssertionError("greedy: domain does not fit with every candidate evicted")
    for i in chosen:
        state.remove(i)
    return _prune(state, chosen, weights)


def _prune(state: _Domain, chosen: Sequence[int], weights: Sequence[int]) -> list[int]:
    """Drop every victim the podset fits without, heaviest first: the result is minimal."""
    kept = list(chosen)
    for i in kept:
        state.add(i)
    for i in sorted(chosen, key=lambda i: (-weights[i], -i)):
        state.remove(i)
        if state.fits():
            kept.remove(i)
        else:
            state.add(i)
    for i in kept:
        state.remove(i)
    return sorted(kept)


def _improve(
    state: _Domain, chosen: list[int], weights: Sequence[int], budget: _Budget
) -> list[int]:
    """Swap victims for lighter ones while the podset still fits (a local search, one swap at
    a time, heaviest victim first), then prune: the set never grows and stays minimal."""
    current = sorted(chosen)
    for i in current:
        state.add(i)
    outside = sorted((i for i in state.freed if i not in chosen), key=lambda i: (weights[i], i))
    try:
        while (swap := _lighter_swap(state, current, outside, weights, budget)) is not None:
            victim, other = swap
            current[current.index(victim)] = other
            outside.remove(other)
            bisect.insort(outside, victim, key=lambda i: (weights[i], i))
    except _OutOfStepsError:
        pass
    for i in current:
        state.remove(i)
    return _prune(state, current, weights)


def _lighter_swap(
    state: _Domain,
    current: Sequence[int],
    outside: Sequence[int],
    weights: Sequence[int],
    budget: _Budget,
) -> tuple[int, int] | None:
    """Find (victim, lighter replacement) that keeps the podset fitting, and apply it."""
    for victim in sorted(current, key=lambda i: (-weights[i], -i)):
        state.remove(victim)
        try:
            missing = state.count - state.pods
            for other in outside:
                if weights[other] >= weights[victim]:
                    break
                if state.upper[other] < missing:
                    continue
                budget.spend()
                state.add(other)
                if state.fits():
                    return victim, other
                state.remove(other)
        except _OutOfStepsError:
            state.add(victim)
            raise
        state.add(victim)
    return None


def _fewest(values: Sequence[int], target: int) -> int:
    """The fewest of ``values`` whose sum reaches ``target`` (len + 1 when none do)."""
    if target <= 0:
        return 0
    total = 0
    for k, value in enumerate(sorted(values, reverse=True), start=1):
        total += value
        if total >= target:
            return k
    return len(values) + 1


def _lower_bound(state: _Domain) -> int:
    """Fewest victims that could possibly make the domain fit: by pods, and by each resource."""
    bounds = [_fewest(list(state.upper.values()), state.count - state.pods)]
    for r, short in enumerate(state.shortfall):
        bounds.append(_fewest([volume[r] for volume in state.volume.values()], short))
    return max(bounds)


def _suffix_best(values: Sequence[int], size: int, *, largest: bool) -> list[list[int]]:
    """``out[j][s]``: the sum of the ``s`` largest (or smallest) of ``values[j:]``, s ≤ size."""
    out: list[list[int]] = [[0]] * (len(values) + 1)
    kept: list[int] = []
    sign = -1 if largest else 1
    for j in range(len(values) - 1, -1, -1):
        bisect.insort(kept, sign * values[j])
        del kept[size:]
        sums = [0]
        for value in kept:
            sums.append(sums[-1] + sign * value)
        out[j] = sums
    return out


def _exact(
    state: _Domain,
    size: int,
    weights: Sequence[int],
    best_weight: int | None,
    budget: _Budget,
) -> tuple[tuple[list[int], int] | None, bool]:
    """The lightest set of exactly ``size`` victims that fits, lighter than ``best_weight``.

    Returns ((victims, weight) or None when there is none, whether the search finished within
    the budget). Depth-first over the candidates in a fixed order, cutting a branch when the
    largest bounds of the remaining candidates cannot reach the count, or when their lightest
    weights cannot beat the best weight found. Candidates are tried by decreasing bound, which
    makes the first cut tight (and measured on the benchmark, beats lightest-first).
    """
    order = sorted(state.freed, key=lambda i: (-state.upper[i], weights[i], i))
    most = _suffix_best([state.upper[i] for i in order], size, largest=True)
    lightest = _suffix_best([weights[i] for i in order], size, largest=False)
    scarce = [r for r, short in enumerate(state.shortfall) if short > 0]
    most_volume = {
        r: _suffix_best([state.volume[i][r] for i in order], size, largest=True) for r in scarce
    }
    still_short = {r: state.shortfall[r] for r in scarce}
    best: list[int] | None = None
    limit = best_weight
    chosen: list[int] = []

    def visit(start: int, weight: int) -> None:
        nonlocal best, limit
        slots = size - len(chosen)
        if slots == 0:
            if state.fits() and (limit is None or weight < limit):
                best, limit = list(chosen), weight
            return
        for j in range(start, len(order) - slots + 1):
            # Each cut below holds for every later j too: what is left only shrinks.
            if state.pods + most[j][slots] < state.count:
                return
            if any(most_volume[r][j][slots] < short for r, short in still_short.items()):
                return
            if limit is not None and weight + lightest[j][slots] >= limit:
                return
            budget.spend()
            i = order[j]
            state.add(i)
            chosen.append(i)
            for r in still_short:
                still_short[r] -= state.volume[i][r]
            try:
                visit(j + 1, weight + weights[i])
            finally:
                for r in still_short:
                    still_short[r] += state.volume[i][r]
                chosen.pop()
                state.remove(i)

    finished = True
    try:
        visit(0, 0)
    except _OutOfStepsError:
        finished = False
    if best is None or limit is None:
        return None, finished
    return (sorted(best), limit), finished


def search_pod_fit(
    problem: PodFitProblem, *, step_budget: int = DEFAULT_STEP_BUDGET
) -> SearchOutcome:
    """Find the best victim set for a single-podset gang (see the module docstring).

    Steps: (1) if some domain holds the podset already, no victims. (2) Find the lowest
    priority band — candidates with priority ≤ p — whose complete eviction lets some domain hold
    it (binary search over the distinct priorities, since freeing more never hurts). (3) In each
    domain that then fits, a lower bound on the victims it needs; greedy sets (best pods gain,
    pruned to minimal) in the domains of the lowest bound, improved by lighter swaps, give an
    incumbent; domains are then visited by their lower bound and searched exactly by increasing
    size with branch and bound, until the budget runs out.
    """
    candidates = problem.candidates
    base_per_node = _pods_per_node(problem.free, problem.request)
    base = np.bincount(problem.domain_of, weights=base_per_node, minlength=problem.domains).astype(
        np.int64
    )
    if problem.domains and int(base.max()) >= problem.count:
        ranked = np.flatnonzero(base >= problem.count)
        return SearchOutcome(victims=(), exact=True, domain=int(ranked[0]))

    useful = [i for i, c in enumerate(candidates) if c.freed]
    bands = sorted({candidates[i].priority for i in useful})
    if not bands:
        most = int(base.max()) if problem.domains else 0
        return SearchOutcome(victims=None, exact=True, best_pods=most)

    table = _FreedTable(problem)

    def members(band: int) -> list[int]:
        return [i for i in useful if candidates[i].priority <= bands[band]]

    def domain_pods(band: int) -> npt.NDArray[np.int64]:
        return _domain_pods(problem, problem.free + table.freed(members(band)))

    top = domain_pods(len(bands) - 1)
    if int(top.max()) < problem.count:
        return SearchOutcome(victims=None, exact=True, best_pods=int(top.max()))
    low, high = 0, len(bands) - 1
    while low < high:
        middle = (low + high) // 2
        if int(domain_pods(middle).max()) >= problem.count:
            high = middle
        else:
            low = middle + 1
    allowed = members(low)
    freed_all = table.freed(allowed)
    all_per_node = _pods_per_node(problem.free + freed_all, problem.request)
    with_all = np.bincount(
        problem.domain_of, weights=all_per_node, minlength=problem.domains
    ).astype(np.int64)
    weights = _weights(candidates)
    by_domain: dict[int, dict[int, None]] = {}
    for i in allowed:
        for n in candidates[i].freed:
            by_domain.setdefault(int(problem.domain_of[n]), {})[i] = None
    states = [
        (d, _Domain(problem, d, list(by_domain.get(d, {})), base_per_node, all_per_node))
        for d in (int(d) for d in np.flatnonzero(with_all >= problem.count))
    ]

    plans = sorted(
        ((_lower_bound(state), d, state) for d, state in states), key=lambda p: (p[0], p[1])
    )
    best: _Score | None = None
    best_domain: int | None = None
    for bound, d, state in plans:
        if best is not None and bound > plans[0][0]:
            break  # the exact search below covers the other domains
        chosen = _greedy(state, weights)
        score = _Score(bands[low], len(chosen), sum(weights[i] for i in chosen), tuple(chosen))
        if best is None or score < best:
            best, best_domain = score, d
    assert best is not None

    budget = _Budget(step_budget)
    exact = True
    # A lighter set of the same size found cheaply tightens every bound of the exact search.
    state = next(state for d, state in states if d == best_domain)
    chosen = _improve(state, list(best.indices), weights, budget)
    best = min(
        best,
        _Score(bands[low], len(chosen), sum(weights[i] for i in chosen), tuple(chosen)),
    )
    for bound, d, state in plans:
        if bound > best.count:
            break
        for size in range(bound, best.count + 1):
            limit = best.weight if size == best.count else None
            found, exact = _exact(state, size, weights, limit, budget)
            if found is not None:
                victims, weight = found
                score = _Score(bands[low], size, weight, tuple(victims))
                if score < best:
                    best, best_domain = score, d
            if found is not None or not exact:
                break
        if not exact:
            break
    return SearchOutcome(victims=best.indices, exact=exact, domain=best_domain, steps=budget.used)


# --------------------------------------------------------------------------- oracle search


def search_with_oracle(
    candidates: Sequence[Candidate],
    fits: Callable[[frozenset[int]], bool],
    *,
    call_budget: int = DEFAULT_ORACLE_BUDGET,
) -> SearchOutcome:
    """Find the best victim set when only ``fits(victims)`` can tell whether the gang fits.

    ``fits`` must be monotone (evicting more never makes the gang unplaceable). Candidates with
    no ``freed`` entry are never taken. Steps: no victims if ``fits(∅)``; lowest priority band by
    binary search; the shortest fitting prefix of the band's candidates ordered by room freed
    (binary search), pruned to minimal; then every smaller set by increasing size, and every set
    of the same size for a lighter one, while the call budget lasts.
    """
    calls = 0

    def ask(victims: frozenset[int]) -> bool:
        nonlocal calls
        calls += 1
        return fits(victims)

    if ask(frozenset()):
        return SearchOutcome(victims=(), exact=True, steps=calls)
    useful = [i for i, c in enumerate(candidates) if c.freed]
    bands = sorted({candidates[i].priority for i in useful})

    def members(band: int) -> list[int]:
        return [i for i in useful if candidates[i].priority <= bands[band]]

    if not bands or not ask(frozenset(members(len(bands) - 1))):
        return SearchOutcome(victims=None, exact=True, steps=calls)
    low, high = 0, len(bands) - 1
    while low < high:
        middle = (low + high) // 2
        if ask(frozenset(members(middle))):
            high = middle
        else:
            low = middle + 1
    weights = _weights(candidates)

    def room(i: int) -> int:
        return sum(sum(v) for v in candidates[i].freed.values())

    order = sorted(members(low), key=lambda i: (-room(i), weights[i], i))
    # The whole band fits, so some prefix does; find the shortest by bisection.
    shortest = bisect.bisect_left(
        range(1, len(order) + 1), True, key=lambda n: ask(frozenset(order[:n]))
    )
    chosen = order[: shortest + 1]
    for i in sorted(chosen, key=lambda i: (-weights[i], -i)):
        trial = [j for j in chosen if j != i]
        if ask(frozenset(trial)):
            chosen = trial
    best = _Score(bands[low], len(chosen), sum(weights[i] for i in chosen), tuple(sorted(chosen)))

    exact = True
    pool = sorted(members(low))
    for size in range(1, best.count + 1):
        found = False
        for combo in combinations(pool, size):
            weight = sum(weights[i] for i in combo)
            if size == best.count and weight >= best.weight:
                continue
            if calls >= call_budget:
                exact = False
                break
            if ask(frozenset(combo)):
                # Later sets of this size must now be lighter than this one to replace it.
                best = _Score(bands[low], size, weight, combo)
                found = True
        if not exact or found:
            break
    return SearchOutcome(victims=best.indices, exact=exact, steps=calls)
