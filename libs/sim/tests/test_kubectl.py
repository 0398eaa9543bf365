"""kubectl against the simulator: discovery, list, watch, create, apply, patch, delete.

dev/bootstrap installs kubectl (Debian's kubernetes-client) where it is missing; without it
these tests fail rather than skip. The same HTTP paths kubectl uses (discovery, list, watch with
resourceVersion and bookmarks, get, create, merge and strategic patches, delete) are also
exercised through kubernetes-asyncio in test_kubernetes_asyncio.py and with plain aiohttp in
test_http_api.py; what only this module checks is that kubectl itself accepts the simulator's
answers (its discovery fallback and the OpenAPI v3 documents it asks for before writing).
"""

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tidegate.sim import SimCluster

KUBECTL = shutil.which("kubectl")


@pytest.fixture(autouse=True)
def _kubectl_is_installed() -> None:
    if KUBECTL is None:
        pytest.fail(
            "kubectl is not on PATH: run dev/bootstrap (it installs Debian's kubernetes-client)"
        )


JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: from-kubectl}
spec:
  template:
    metadata: {labels: {app: kubectl}}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
"""


def client_minor_version() -> int:
    """kubectl's minor version (Debian's kubernetes-client is 1.20)."""
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    ).stdout
    return int(json.loads(out)["clientVersion"]["minor"].rstrip("+"))


def write_flags() -> tuple[str, ...]:
    """kubectl before 1.27 validates writes against OpenAPI v2, which the simulator does not
    serve (it serves the v3 documents newer clients ask for): skip that client-side check."""
    return ("--validate=false",) if client_minor_version() < 27 else ()


async def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    assert KUBECTL is not None
    if args and args[0] in ("create", "apply"):
        args = (*args, *write_flags())
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate(stdin.encode() if stdin else None)
    assert process.returncode == 0, f"kubectl {' '.join(args)} failed: {err.decode()}"
    return out.decode()


async def test_kubectl_lists_watches_and_writes(bare: SimCluster, tmp_path: Path) -> None:
    config = bare.write_kubeconfig(tmp_path / "kubeconfig")
    assert KUBECTL is not None
    watcher = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(config),
        "get",
        "pods",
        "--watch",
        "-o",
        "name",
        "--request-timeout=3s",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    nodes = json.loads(await kubectl(config, "get", "nodes", "-o", "json"))
    assert len(nodes["items"]) == 4
    topologies = json.loads(await kubectl(config, "get", "topologies.tidegate.io", "-o", "json"))
    assert topologies["items"][0]["metadata"]["name"] == "default"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "watched"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    assert "pod/watched created" in await kubectl(
        config, "create", "-f", "-", stdin=json.dumps(pod)
    )
    assert "from-kubectl created" in await kubectl(config, "apply", "-f", "-", stdin=JOB)
    assert "unchanged" in await kubectl(config, "apply", "-f", "-", stdin=JOB)
    out, _ = await watcher.communicate()
    assert "pod/watched" in out.decode().split()
