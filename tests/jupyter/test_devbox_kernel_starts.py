"""Starting a devbox kernel is one operation per box, and a start can be cancelled.

Kernels of one Jupyter server that ask for a box at once share its create, start and
wait; a create that loses to another server adopts the box; a start that waits for a
device is cancelled through the extension's route and gives back the box it started.
Everything runs against the real controller on the testbed, with a Lab started as
``make up`` starts it and a Debian sshd on loopback standing in for the box's inside.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import requests
from devboxes_jupyter.box_start import BoxRequest, BoxStarts, Readiness
from devboxes_jupyter.provisioner import box_name
from devboxes_testbed import ROCM
from devboxes_testbed.controller import Controller
from labserver import (
    KERNEL_START_TIMEOUT,
    KernelLab,
    box_ssh_port,
    execute_once,
    module_kernel_lab,
    refused,
    start_kernel,
    wait_offered,
    write_kernelspec,
)
from support import fill_profile_until_blocked, served_profile, wait_for

from devboxes_sdk import models
from devboxes_sdk.client import Client

setup = module_kernel_lab("s", 120)


def _starts(kernel_lab: KernelLab) -> list[dict[str, Any]]:
    watch = kernel_lab.lab.api("GET", "devboxes/api/watch?timeout=0")
    kernels: list[dict[str, Any]] = watch["kernels"]
    return kernels


def test_two_kernels_started_at_once_share_one_box_and_both_run(
    controller: Controller, setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    name = box_name(setup.owner, None)
    cleanup.append(name)
    wait_offered(setup.lab, "devbox-cpu")
    # Both requests leave together, as two notebooks opened at once do.
    together = threading.Barrier(2)
    answers: list[requests.Response] = []

    def start() -> None:
        together.wait()
        answers.append(start_kernel(setup.lab, "devbox-cpu"))

    starters = [threading.Thread(target=start) for _ in range(2)]
    for starter in starters:
        starter.start()
    port = box_ssh_port(controller_client, name)
    with setup.box_sshd(controller, name, port, "sshd-shared"):
        for starter in starters:
            starter.join(KERNEL_START_TIMEOUT)
        assert [answer.status_code for answer in answers] == [201, 201], [
            answer.text for answer in answers
        ]
        for answer in answers:
            assert execute_once(setup.lab, answer.json()["id"], "6 * 7").results == ["42"]
            setup.lab.api("DELETE", f"api/kernels/{answer.json()['id']}", timeout=60)


def test_a_create_that_loses_to_another_server_adopts_the_box(
    controller: Controller, controller_client: Client, cleanup: list[str], monkeypatch: Any
) -> None:
    # Each BoxStarts is one Jupyter server's; Client() in them reaches this controller.
    monkeypatch.setenv("DEVBOX_URL", controller.url)
    monkeypatch.setenv("DEVBOX_TOKEN", controller.token)
    monkeypatch.delenv("DEVBOX_TOKEN_FILE", raising=False)
    servers = [BoxStarts() for _ in range(4)]
    request = BoxRequest(
        name=f"adopt-{threading.get_native_id()}",
        profile=None,
        preset="small",
        ttl_hours=1,
        timeout=120,
    )
    cleanup.append(request.name)
    together = threading.Barrier(len(servers))
    answers: list[Readiness | Exception] = []

    def start(server: BoxStarts, kernel_id: str) -> None:
        together.wait()
        try:
            answers.append(
                server.ready(kernel_id, request, lambda _client, _box: None, lambda *_: None)
            )
        except Exception as error:  # noqa: BLE001 - the assertion below names it
            answers.append(error)

    threads = [
        threading.Thread(target=start, args=(server, f"k{index}"))
        for index, server in enumerate(servers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    failures = [answer for answer in answers if isinstance(answer, Exception)]
    assert failures == []
    ready = [answer for answer in answers if isinstance(answer, Readiness)]
    assert len(ready) == len(servers)
    assert all(answer.box.state is models.DevboxState.READY for answer in ready)
    # One server created the box; every other one adopted it and took nothing.
    assert sorted(answer.created for answer in ready) == [False] * (len(servers) - 1) + [True]
    assert [answer.took for answer in ready if not answer.created] == [False] * (len(servers) - 1)


def test_a_start_waiting_for_a_device_is_cancelled_and_gives_the_box_back(
    setup: KernelLab, controller_client: Client, cleanup: list[str]
) -> None:
    profile = served_profile(controller_client, ROCM)

    fill_profile_until_blocked(controller_client, profile.name, cleanup, prefix="fill-c")

    name = box_name(setup.owner, profile.name)
    cleanup.append(name)
    write_kernelspec(setup.lab, "devbox-amd-cancel", sys.executable, {"profile": profile.name})
    answers: list[requests.Response] = []
    starter = threading.Thread(
        target=lambda: answers.append(start_kernel(setup.lab, "devbox-amd-cancel"))
    )
    starter.start()

    def waiting_in_line() -> str | None:
        """the start reports its box's place in line"""
        for start in _starts(setup):
            if start["box"] == name and " in line" in start["message"]:
                kernel_id: str = start["kernel_id"]
                return kernel_id
        return None

    kernel_id = wait_for(waiting_in_line, timeout=120)
    answer = setup.lab.api("DELETE", f"devboxes/api/kernels/{kernel_id}")
    assert answer == {"kernel_id": kernel_id, "cancelled": True}
    starter.join(60)
    assert answers, "the cancelled start did not answer"
    assert refused(answers[0]) == (
        f"the kernel start was cancelled; box {name}, started for this kernel, "
        "is stopped again (home kept)"
    )
    assert controller_client.get(name).state is models.DevboxState.STOPPED
    assert kernel_id not in [kernel["id"] for kernel in setup.lab.api("GET", "api/kernels")]
