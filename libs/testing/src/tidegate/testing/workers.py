"""What a pytest-xdist worker hands its controller at the end of a run, by key.

Under ``./dev/test`` the tests run in xdist workers, whose terminal output nobody sees; what a
test leaves for the end of the run (the chaos summary, the RBAC report, notes of services
started twice) goes into the worker's ``config.workeroutput`` under these keys, and the root
conftest.py prints it from the controller.
"""

from typing import Final

RBAC_USAGE: Final = "tidegate_rbac_usage"
""":meth:`tidegate.testing.rbac.RbacUsage.as_json` of the worker's end-to-end scenarios that ran
the chart's RBAC (on the real control plane or the simulator)."""
REPORT_LINES: Final = "tidegate_report_lines"
"""Lines for the end of the run, printed as they are (the chaos summary, notes of services a
real-cluster scenario had to start twice)."""
