"""A LocalStack with ``access``: each service runs as its own ServiceAccount on a simulator that
enforces RBAC; the stack itself keeps the admin's kubeconfig."""

from pathlib import Path

import pytest
import yaml

from tidegate.bus.server import NatsServerProcess
from tidegate.cli.stack import LocalStack, ServiceAccess, StackError, StackSettings
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.rbac import ADMIN_USER


def token_of(kubeconfig: str) -> str:
    """The bearer token a kubeconfig file holds."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    return str(config["users"][0]["user"]["token"])


async def test_each_service_gets_a_token_of_its_own_service_account(tmp_path: Path) -> None:
    account = {"apiVersion": "v1", "kind": "ServiceAccount"}
    access = ServiceAccess(
        documents=(
            {**account, "metadata": {"name": "tg-preemption", "namespace": "tidegate-system"}},
        ),
        accounts={"preemption": ("tidegate-system", "tg-preemption")},
    )
    settings = SimSettings(nodes=None, scheduler=False, kubelet=False, controllers=False, rbac=True)
    async with SimCluster.running(settings) as sim:
        stack = LocalStack(
            StackSettings(workdir=tmp_path, access=access), NatsServerProcess(port=4222), sim
        )
        preemption = stack.service_env("preemption", 8080)["TIDEGATE_KUBECONFIG"]
        user = sim.access.authenticate(f"Bearer {token_of(preemption)}")
        assert user.name == "system:serviceaccount:tidegate-system:tg-preemption"
        admission = stack.service_env("admission", 8081)["TIDEGATE_KUBECONFIG"]
        assert sim.access.authenticate(f"Bearer {token_of(admission)}").name == ADMIN_USER
        assert (
            sim.access.authenticate(f"Bearer {token_of(str(stack.kubeconfig))}").name == ADMIN_USER
        )


def test_access_needs_the_simulated_cluster(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="access"):
        StackSettings(
            workdir=tmp_path,
            kubeconfig=tmp_path / "kubeconfig",
            access=ServiceAccess(documents=(), accounts={}),
        )
