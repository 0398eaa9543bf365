"""The exact fewest-domains placement of one podset, as an integer program (HiGHS).

Not a benchmark: bench/placement.py and libs/placement/tests compare placement's greedy answer
with this optimum on small instances. For nodes n with room f_n in domains D(n): minimise
Σ_d y_d subject to Σ_n x_n = count, 0 ≤ x_n ≤ f_n · y_D(n), x integer, y binary; with
``outer_of`` the objective is lexicographic, fewest parents first, as placement's is. Needs
highspy (a dev dependency).
"""

from collections.abc import Sequence

import highspy


def fewest_domains(
    room: Sequence[int],
    domain_of: Sequence[int],
    count: int,
    outer_of: dict[int, int] | None = None,
) -> int | None:
    """The fewest distinct domains that can hold ``count`` pods, or None if they cannot.

    ``room[n]`` is how many pods fit on node ``n``; ``domain_of[n]`` the node's domain index;
    ``outer_of[d]`` (optional) the parent of domain ``d``, minimised first.
    """
    if count <= 0:
        return 0
    if sum(room) < count:
        return None
    domains = sorted(set(domain_of))
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    used = {d: h.addBinary(obj=1.0) for d in domains}
    if outer_of is not None:
        weight = float(len(domains) + 1)
        outer = {b: h.addBinary(obj=weight) for b in sorted(set(outer_of.values()))}
        for d in domains:
            h.addConstr(used[d] - outer[outer_of[d]] <= 0)
    pods = [h.addIntegral(lb=0, ub=max(0, r)) for r in room]
    h.addConstr(sum(pods) == count)
    for n, r in enumerate(room):
        if r > 0:
            h.addConstr(pods[n] - r * used[domain_of[n]] <= 0)
    h.setMinimize()
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    solution = h.getSolution().col_value
    return sum(round(solution[i]) for i in range(len(domains)))
