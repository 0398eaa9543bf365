"""What the chart grants each service against what the services asked for, over a test run.

The real-cluster end-to-end scenarios read every request from the API server's audit log, the
simulator's (which enforce the chart's RBAC too) from its access log; a grant no request of any
scenario on either used is reported at the end of the run (docs/testing.md, RBAC from
reality). Under pytest-xdist each worker sums its own scenarios and hands them to the
controller as JSON (:meth:`RbacUsage.as_json`), which merges them before reporting.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

Permission = tuple[str, str, str]
"""(API group, resource or resource/subresource, verb)."""

UsageJson = dict[str, dict[str, list[list[str]]]]
"""``{"granted": {service: [[group, resource, verb], …]}, "used": {…}}``."""


@dataclass
class RbacUsage:
    """Grants and requests per service, summed over every scenario that reported them."""

    granted: dict[str, set[Permission]] = field(default_factory=dict)
    used: dict[str, set[Permission]] = field(default_factory=dict)

    def add(
        self,
        granted: Mapping[str, set[Permission]],
        used: Mapping[str, set[Permission]],
    ) -> None:
        """Take in one scenario's grants and requests."""
        for service, grants in granted.items():
            self.granted.setdefault(service, set()).update(grants)
        for service, asked in used.items():
            self.used.setdefault(service, set()).update(asked)

    def unused(self) -> dict[str, set[Permission]]:
        """Grants that no request of any scenario used, per service."""
        return {
            service: grants - self.used.get(service, set())
            for service, grants in sorted(self.granted.items())
            if grants - self.used.get(service, set())
        }

    def report(self) -> list[str]:
        """Lines for the end of the run (empty when nothing ran)."""
        if not self.granted:
            return []
        lines = [
            "RBAC: granted by the chart, used by no request in the end-to-end scenarios "
            "(simulator and real cluster):"
        ]
        for service, grants in self.unused().items():
            text = ", ".join(
                f"{verb} {group or 'core'}/{resource}" for group, resource, verb in sorted(grants)
            )
            lines.append(f"  {service}: {text}")
        return lines

    def as_json(self) -> UsageJson:
        """Everything, as JSON-able lists (what an xdist worker sends its controller)."""
        return {
            "granted": {s: [list(p) for p in sorted(g)] for s, g in self.granted.items()},
            "used": {s: [list(p) for p in sorted(u)] for s, u in self.used.items()},
        }

    def merge_json(self, data: UsageJson) -> None:
        """Add what :meth:`as_json` of another run produced."""
        self.add(
            {s: {_permission(p) for p in g} for s, g in data.get("granted", {}).items()},
            {s: {_permission(p) for p in u} for s, u in data.get("used", {}).items()},
        )


def _permission(item: list[str]) -> Permission:
    group, resource, verb = item
    return group, resource, verb
