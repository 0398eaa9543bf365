"""Informer contract: list then watch, selectors, bookmarks, reconnects, 410 relist with tombstones."""

import asyncio
from pathlib import Path

import pytest

from tidegate.kube import (
    DEPLOYMENTS,
    JOBS,
    PODGROUPS,
    PODS,
    QUEUES,
    Informer,
    InformerState,
    KubeEvent,
    Synced,
    connect,
)
from tidegate.testing.faultproxy import KubeFaultProxy

from .conftest import CONTRACT_LABEL, INERT, PAUSE, ContractEnv, k8s
from .helpers import eventually, names, recording

pytestmark = pytest.mark.kube_contract


def _informer(env: ContractEnv, **kwargs: object) -> Informer:
    return Informer(
        env.client,
        PODS,
        namespace=env.namespace,
        label_selector=f"{CONTRACT_LABEL}={env.run_id}",
        **kwargs,  # type: ignore[arg-type]
    )


async def test_list_then_watch_sees_every_change(env: ContractEnv) -> None:
    for name in ("a", "b", "c"):
        await env.create_pod(name)
    async with recording(_informer(env)) as rec:
        listed, synced = await rec.until_synced()
        assert sorted(names(listed, "ADDED")) == ["a", "b", "c"]
        assert synced.count == 3
        assert not synced.relist
        assert all(e.obj["kind"] == "Pod" and e.obj["apiVersion"] == "v1" for e in listed)

        await env.create_pod("d")
        added = await rec.next_event()
        assert (added.type, added.key) == ("ADDED", (env.namespace, "d"))

        await env.client.annotate("Pod", env.namespace, "d", {"example.com/touched": "yes"})
        modified = await rec.next_event()
        assert modified.type == "MODIFIED"
        assert modified.obj["metadata"]["annotations"]["example.com/touched"] == "yes"  # type: ignore[index]

        await env.client.delete_pod(env.namespace, "a")
        deleted = await rec.next_event()
        if deleted.type == "MODIFIED":
            # A real API server may first store the deletionTimestamp (grace 0), then delete.
            assert deleted.key[1] == "a"
            assert deleted.obj["metadata"]["deletionTimestamp"]  # type: ignore[index]
            deleted = await rec.next_event()
        assert (deleted.type, deleted.key[1]) == ("DELETED", "a")
        assert int(rec.informer.resource_version) >= int(deleted.resource_version)
        assert set(rec.informer.state().objects) == {(env.namespace, n) for n in "bcd"}


async def test_selectors_filter_list_and_watch(env: ContractEnv) -> None:
    await env.create_pod("wanted", labels={"role": "worker"})
    await env.create_pod("other", labels={"role": "leader"})
    label_informer = Informer(
        env.client, PODS, namespace=env.namespace, label_selector="role=worker"
    )
    field_informer = Informer(
        env.client, PODS, namespace=env.namespace, field_selector="metadata.name=other"
    )
    async with recording(label_informer) as by_label, recording(field_informer) as by_field:
        assert names((await by_label.until_synced())[0]) == ["wanted"]
        assert names((await by_field.until_synced())[0]) == ["other"]
        await env.create_pod("late-worker", labels={"role": "worker"})
        await env.create_pod("late-leader", labels={"role": "leader"})
        assert (await by_label.next_event()).key[1] == "late-worker"
        await env.client.annotate("Pod", env.namespace, "other", {"example.com/x": "1"})
        event = await by_field.next_event()
        assert (event.type, event.key[1]) == ("MODIFIED", "other")


async def test_bookmarks_advance_the_resource_version(env: ContractEnv) -> None:
    # A real API server sends a bookmark about once a minute, and 2 s before a watch's
    # timeout: a short watch timeout makes it come soon.
    async with (
        await connect(env.settings(watch_timeout_seconds=5)) as client,
        recording(
            Informer(
                client,
                PODS,
                namespace=env.namespace,
                label_selector=f"{CONTRACT_LABEL}={env.run_id}",
            )
        ) as rec,
    ):
        _, synced = await rec.until_synced()
        start = int(synced.resource_version)
        # Changes the selector hides still move the collection's resourceVersion on; only
        # BOOKMARK events can tell the informer about it.
        await env.create_pod("hidden", labels={CONTRACT_LABEL: "someone-else"})

        async def advanced() -> bool:
            return int(rec.informer.resource_version) > start

        await eventually(advanced, within=env.target.bookmark_wait_seconds)
        assert [i for i in rec.items if isinstance(i, KubeEvent)] == []


async def test_reconnects_when_the_server_ends_the_watch(
    env: ContractEnv, proxy: KubeFaultProxy, tmp_path: Path
) -> None:
    kubeconfig = proxy.write_kubeconfig(tmp_path / "short-watch-kubeconfig")
    async with await connect(
        env.settings(kubeconfig=kubeconfig, watch_timeout_seconds=1)
    ) as client:
        informer = Informer(
            client, PODS, namespace=env.namespace, label_selector=f"{CONTRACT_LABEL}={env.run_id}"
        )
        async with recording(informer) as rec:
            await rec.until_synced()
            for index in range(2):
                # Each wait outlasts one server-side watch timeout, so the next event arrives
                # on a new watch request resumed from the last resourceVersion.
                await env.create_pod(f"p{index}")
                event = await rec.next_event()
                assert (event.type, event.key[1]) == ("ADDED", f"p{index}")
                await asyncio.sleep(1.3)
            assert informer.relists == 0
            assert not any(isinstance(i, Synced) and i.relist for i in rec.items)
    watches = [s for s in proxy.seen if "watch=true" in s.query]
    assert len(watches) >= 3
    assert all(s.status == 200 for s in watches)
    assert len(proxy.seen) - len(watches) == 1  # one list, never relisted


async def test_gone_relists_and_synthesizes_tombstones(env: ContractEnv) -> None:
    for name in ("keep", "change", "vanish"):
        await env.create_pod(name)
    first = _informer(env)
    async with recording(first) as rec:
        await rec.until_synced()
    saved = first.state()
    assert len(saved.objects) == 3

    await env.client.delete_pod(env.namespace, "vanish")
    await env.client.annotate("Pod", env.namespace, "change", {"example.com/v": "2"})
    await env.create_pod("new")
    await env.target.expire_watch_history()

    # Resume from a resourceVersion the server no longer holds: it must answer 410 Gone.
    resumed = _informer(
        env, initial_state=InformerState(resource_version="1", objects=saved.objects)
    )
    async with recording(resumed) as rec:
        first_item = await rec.next()
        assert isinstance(first_item, Synced)
        assert not first_item.relist
        events, synced = await rec.until_synced()
        assert synced.relist
        assert resumed.relists == 1
        by_type = {(e.type, e.key[1]) for e in events}
        assert by_type == {("DELETED", "vanish"), ("MODIFIED", "change"), ("ADDED", "new")}
        tombstone = next(e for e in events if e.type == "DELETED")
        assert tombstone.obj["metadata"]["name"] == "vanish"  # type: ignore[index]
        assert (
            tombstone.resource_version
            == saved.objects[(env.namespace, "vanish")]["metadata"]["resourceVersion"]
        )  # type: ignore[index]
        assert set(resumed.state().objects) == {
            (env.namespace, n) for n in ("keep", "change", "new")
        }

        # and it keeps watching after the relist
        await env.create_pod("after")
        event = await rec.next_event()
        assert (event.type, event.key[1]) == ("ADDED", "after")


async def test_a_metadata_cache_keeps_identities_and_still_makes_tombstones(
    env: ContractEnv,
) -> None:
    """``cache="metadata"`` (the watcher's): events still carry whole objects, the state holds
    identities only, and a relist still turns a vanished object into a tombstone."""
    for name in ("stay", "vanish"):
        await env.create_pod(name)
    first = _informer(env, cache="metadata")
    async with recording(first) as rec:
        listed, _ = await rec.until_synced()
        assert all("spec" in e.obj for e in listed)
    saved = first.state()
    kept = saved.objects[(env.namespace, "stay")]
    assert set(kept) == {"apiVersion", "kind", "metadata"}
    assert "managedFields" not in kept["metadata"]  # type: ignore[operator]

    await env.client.delete_pod(env.namespace, "vanish")
    await env.target.expire_watch_history()
    resumed = _informer(
        env,
        initial_state=InformerState(resource_version="1", objects=saved.objects),
        cache="metadata",
    )
    async with recording(resumed) as rec:
        await rec.next()
        events, synced = await rec.until_synced()
        assert synced.relist
        assert {(e.type, e.key[1]) for e in events} == {("DELETED", "vanish")}
        tombstone = events[0]
        assert isinstance(tombstone, KubeEvent)
        assert tombstone.obj["metadata"]["uid"]  # type: ignore[index]
        assert all(
            set(o) == {"apiVersion", "kind", "metadata"} for o in resumed.state().objects.values()
        )


async def test_resume_from_a_recent_state_skips_the_list(env: ContractEnv) -> None:
    await env.create_pod("x")
    first = _informer(env)
    async with recording(first) as rec:
        await rec.until_synced()
    await env.create_pod("y")
    resumed = _informer(env, initial_state=first.state())
    async with recording(resumed) as rec:
        assert isinstance(await rec.next(), Synced)
        event = await rec.next_event()
        assert (event.type, event.key[1]) == ("ADDED", "y")
        assert resumed.relists == 0


async def test_paged_list(env: ContractEnv) -> None:
    for index in range(7):
        await env.create_pod(f"p{index}")
    async with await connect(env.settings(list_page_size=3)) as client:
        informer = Informer(
            client, PODS, namespace=env.namespace, label_selector=f"{CONTRACT_LABEL}={env.run_id}"
        )
        async with recording(informer) as rec:
            listed, synced = await rec.until_synced()
        assert sorted(names(listed)) == [f"p{i}" for i in range(7)]
        assert synced.count == 7
        page = await client.list_objects(PODS, namespace=env.namespace, limit=3)
        assert len(page.items) == 3
        assert page.continue_token


async def test_custom_resources_and_batch_kinds(env: ContractEnv) -> None:
    podgroups = Informer(env.client, PODGROUPS, namespace=env.namespace)
    queues = Informer(env.client, QUEUES, label_selector=f"{CONTRACT_LABEL}={env.run_id}")
    jobs = Informer(env.client, JOBS, namespace=env.namespace)
    deployments = Informer(env.client, DEPLOYMENTS, namespace=env.namespace)
    async with (
        recording(podgroups) as pg,
        recording(queues) as q,
        recording(jobs) as j,
        recording(deployments) as d,
    ):
        for rec in (pg, q, j, d):
            assert (await rec.until_synced())[0] == []
        await env.client.create(
            PODGROUPS,
            {
                "apiVersion": "tidegate.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "gang"},
                "spec": {"minMember": 2},
            },
            namespace=env.namespace,
        )
        queue_name = f"tg-contract-{env.run_id}"
        await env.create_cluster_object(
            QUEUES,
            {
                "apiVersion": "tidegate.io/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": queue_name, "labels": {CONTRACT_LABEL: env.run_id}},
                "spec": {"priority": 10},
            },
        )
        await env.client.create(
            JOBS,
            k8s.job("train", parallelism=None, template=INERT, suspend=True),
            namespace=env.namespace,
        )
        event = await pg.next_event()
        assert (event.type, event.key, event.obj["kind"]) == (
            "ADDED",
            (env.namespace, "gang"),
            "PodGroup",
        )
        event = await q.next_event()
        assert (event.type, event.key) == ("ADDED", ("", queue_name))
        event = await j.next_event()
        assert (event.type, event.key[1], event.obj["apiVersion"]) == ("ADDED", "train", "batch/v1")
        await env.client.create(
            DEPLOYMENTS,
            k8s.deployment(
                "serve",
                replicas=0,
                paused=True,
                selector={"app": "serve"},
                template=k8s.template(labels={"app": "serve"}, containers=[PAUSE]),
            ),
            namespace=env.namespace,
        )
        event = await d.next_event()
        assert (event.type, event.key[1], event.obj["kind"]) == ("ADDED", "serve", "Deployment")

        await env.client.patch_custom_status(
            "tidegate.io", "v1alpha1", "queues", queue_name, {"admitted": 1}
        )
        event = await q.next_event()
        assert event.type == "MODIFIED"
        assert event.obj["status"]["admitted"] == 1  # type: ignore[index]
