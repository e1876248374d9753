"""The widgets over several clusters, driven from Python as a notebook user would drive
them: two controllers on two testbeds (the second kwok only), each serving a GPU profile
of the same name on a device of its own. lab-a's one device is held by a box, lab-b's is
free; a third controller, frozen, is one line in each widget."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from devboxes_jupyter import labels
from devboxes_jupyter.widgets import AcceleratorPicker, DevboxLauncher, DevboxTable
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.rig import Rig
from support import DevicePool, named_cluster, wait_for

from devboxes_sdk import Client, Clusters, models
from devboxes_sdk.config import ClusterSettings
from devboxes_sdk.errors import NotFound

PROFILE = DevicePool.PROFILE
READY_TIMEOUT = 180


def cluster(name: str, controller: Controller) -> ClusterSettings:
    return ClusterSettings(name, controller.url, controller.token)


def option_labels(dropdown: Any) -> list[str]:
    return [label for label, _key in dropdown.options]


@pytest.fixture(scope="module")
def lab_a(
    testbed: Testbed, kube: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Controller]:
    """A controller on the session's testbed whose one pool device is held by a box."""
    pool = DevicePool(kube, devices=1)
    try:
        with Rig(tmp_path_factory.mktemp("lab-a"), testbed) as rig:
            namespace = rig.create_namespace(f"w-{uuid.uuid4().hex[:10]}")
            controller = rig.start_controller(named_cluster(pool.settings(namespace), "lab-a"))
            with Client(controller.url, controller.token) as client:
                client.create("holder", gpu=PROFILE)

                def taken() -> bool:
                    """lab-a's only pool device is held by its box"""
                    found = client.gpu.availability().profile(PROFILE)
                    return found is not None and found.available == 0

                wait_for(taken, timeout=120)
            yield controller
    finally:
        pool.delete()


@pytest.fixture(scope="module")
def clusters(lab_a: Controller, lab_b: Controller) -> Iterator[Clusters]:
    with Clusters([cluster("lab-a", lab_a), cluster("lab-b", lab_b)]) as both:
        yield both


@contextlib.contextmanager
def purged(controller: Controller, *names: str) -> Iterator[None]:
    """Boxes of these names on ``controller`` are purged when the block ends."""
    try:
        yield
    finally:
        with Client(controller.url, controller.token) as client:
            for name in names:
                with contextlib.suppress(NotFound):
                    client.delete(name, purge=True)


def test_all_clusters_is_the_default_and_shows_each_clusters_free_count(
    clusters: Clusters,
) -> None:
    picker = AcceleratorPicker(clusters)
    assert picker.cluster_dropdown is not None
    assert [tuple(option) for option in picker.cluster_dropdown.options] == [
        ("All clusters", "auto"),
        ("lab-a", "lab-a"),
        ("lab-b", "lab-b"),
    ]
    assert picker.cluster == "auto"
    # Each cluster's own count, never added up.
    assert option_labels(picker.dropdown) == [
        labels.CPU_ONLY,
        f"{DevicePool.DISPLAY} — lab-a: 0 of 1 free · lab-b: 1 of 1 free",
    ]
    assert picker.problems is not None
    assert picker.problems.value == ""
    picker.value = PROFILE
    assert labels.AUTO_NOTE in picker.help.value

    # One cluster chosen: its catalog as with one client, the profile still chosen.
    picker.cluster = "lab-b"
    assert picker.cluster_dropdown.value == "lab-b"
    [profile] = clusters.client("lab-b").capabilities().gpu.profiles
    assert option_labels(picker.dropdown) == [labels.CPU_ONLY, labels.profile_label(profile)]
    assert picker.value == PROFILE
    picker.cluster_dropdown.value = "auto"
    assert picker.cluster == "auto"
    assert picker.value == PROFILE


def test_a_create_for_all_clusters_lands_where_the_device_is_free_and_says_why(
    clusters: Clusters, lab_a: Controller, lab_b: Controller
) -> None:
    name = f"wc-{uuid.uuid4().hex[:8]}"
    launcher = DevboxLauncher(clusters, wait_timeout=READY_TIMEOUT)
    assert launcher.picker.cluster == "auto"
    launcher.name.value = name
    launcher.picker.value = PROFILE
    with purged(lab_b, name):
        launcher.create_button.click()
        assert launcher.error.value == ""
        assert launcher.cluster == "lab-b"
        assert f"created {name} on lab-b: {PROFILE} has 1 free now" in launcher.placement.value
        final = launcher.wait(READY_TIMEOUT + 30)
        assert final is not None
        assert final.state is models.DevboxState.READY, launcher.status.value
        assert f"<b>{name}@lab-b</b>: ready" in launcher.status.value
        box = clusters.client("lab-b").get(name)
        assert box.gpu is not None
        assert box.gpu.profile == PROFILE
        with pytest.raises(NotFound):
            clusters.client("lab-a").get(name)


def test_the_table_has_a_cluster_column_and_acts_on_the_rows_cluster(
    clusters: Clusters, lab_a: Controller, lab_b: Controller
) -> None:
    twin = f"twin-{uuid.uuid4().hex[:8]}"
    with purged(lab_a, twin), purged(lab_b, twin):
        for where in ("lab-a", "lab-b"):
            clusters.client(where).create(twin, ttl_hours=1)
        table = DevboxTable(clusters)
        assert table.HEADERS[0] == "Cluster"
        assert DevboxTable.HEADERS[0] == "Name"
        assert {"holder@lab-a", f"{twin}@lab-a", f"{twin}@lab-b"} <= table.rows.keys()
        assert "holder@lab-b" not in table.rows
        row = table.rows[f"{twin}@lab-b"]
        cells = row.cells()
        assert cells[0].value == "lab-b"
        assert twin in cells[1].value
        assert table.error.value == ""

        row.stop_button.click()
        assert table.error.value == ""
        assert clusters.client("lab-b").get(twin).state is models.DevboxState.STOPPED
        assert clusters.client("lab-a").get(twin).state is not models.DevboxState.STOPPED
        assert table.rows[f"{twin}@lab-b"].start_button.disabled is False


def test_a_frozen_cluster_is_one_line_and_the_others_are_shown(
    lab_a: Controller, lab_b: Controller, testbed: Testbed, tmp_path: Path
) -> None:
    with Rig(tmp_path, testbed) as rig:
        namespace = rig.create_namespace(f"w-{uuid.uuid4().hex[:10]}")
        frozen = rig.start_controller(example_settings(namespace))
        three = Clusters(
            [cluster("lab-a", lab_a), cluster("lab-c", frozen), cluster("lab-b", lab_b)]
        )
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            picker = AcceleratorPicker(three)
            table = DevboxTable(three)
            launcher = DevboxLauncher(three)
            launcher.picker.cluster = "lab-c"
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        three.close()

    assert picker.problems is not None
    assert picker.problems.value == (
        '<span style="color: var(--jp-error-color1, #d32f2f)">lab-c: did not answer in 3 s</span>'
    )
    # lab-b's device may still be coming free from the create before.
    [cpu, pool] = option_labels(picker.dropdown)
    assert cpu == labels.CPU_ONLY
    assert pool.startswith(f"{DevicePool.DISPLAY} — lab-a: 0 of 1 free · lab-b: ")
    # Silent a moment ago: the next widgets give it half a second, and say so.
    assert "<br>" not in table.error.value
    assert "lab-c: did not answer in 0.5 s (nor in 3 s at " in table.error.value
    assert "holder@lab-a" in table.rows
    assert not any(key.endswith("@lab-c") for key in table.rows)
    # Not a stale list: the clusters that answered can be acted on.
    assert table.stale is False
    assert table.rows["holder@lab-a"].stop_button.disabled is False
    assert launcher.picker.problems is not None
    assert "lab-c: did not answer in 0.5 s" in launcher.picker.problems.value
    assert "The accelerator catalog of lab-c could not be loaded: did not answer" in (
        launcher.picker.help.value
    )
    assert launcher.picker.dropdown.disabled is True
