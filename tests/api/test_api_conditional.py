"""Read routes carry entity tags and compress large bodies: cheap polling for clients."""

from __future__ import annotations

import gzip
import json
import uuid

import pytest
import requests
from devboxes_testbed.controller import Controller


@pytest.mark.parametrize("path", ["/api/v1/devboxes", "/api/v1/capabilities"])
def test_an_unchanged_read_is_a_304_without_a_body(controller: Controller, path: str) -> None:
    url = f"{controller.url}{path}"
    first = requests.get(url, headers=controller.headers(), timeout=30)
    assert first.status_code == 200
    tag = first.headers["ETag"]
    again = requests.get(url, headers={**controller.headers(), "If-None-Match": tag}, timeout=30)
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["ETag"] == tag
    other = requests.get(
        url, headers={**controller.headers(), "If-None-Match": '"stale"'}, timeout=30
    )
    assert other.status_code == 200
    assert other.json() == first.json()


def test_a_change_gives_the_list_and_the_box_new_tags(controller: Controller) -> None:
    api = f"{controller.url}/api/v1/devboxes"
    headers = controller.headers()
    before = requests.get(api, headers=headers, timeout=30).headers["ETag"]
    name = f"etag-{uuid.uuid4().hex[:6]}"
    assert requests.post(api, json={"name": name}, headers=headers, timeout=30).status_code == 201
    try:
        listed = requests.get(api, headers={**headers, "If-None-Match": before}, timeout=30)
        assert listed.status_code == 200
        assert name in {box["name"] for box in listed.json()["items"]}
        # Once ready, nothing about the box changes until it is stopped.
        ready = requests.get(
            f"{api}/{name}",
            params={"wait": "ready", "timeout": "120"},
            headers=headers,
            timeout=150,
        )
        assert ready.json()["state"] == "ready"
        box = requests.get(f"{api}/{name}", headers=headers, timeout=30)
        assert box.json() == ready.json()
        tag = box.headers["ETag"]
        same = requests.get(f"{api}/{name}", headers={**headers, "If-None-Match": tag}, timeout=30)
        assert same.status_code == 304
        stopped = requests.post(f"{api}/{name}/stop", headers=headers, timeout=30)
        assert stopped.status_code == 200
        changed = requests.get(
            f"{api}/{name}", headers={**headers, "If-None-Match": tag}, timeout=30
        )
        assert changed.status_code == 200
        assert changed.json()["state"] == "stopped"
    finally:
        requests.delete(f"{api}/{name}", params={"purge": "true"}, headers=headers, timeout=30)


def test_a_large_list_is_gzipped_for_clients_that_ask(controller: Controller) -> None:
    api = f"{controller.url}/api/v1/devboxes"
    headers = controller.headers()
    names = [f"gz-{uuid.uuid4().hex[:6]}" for _ in range(4)]
    for name in names:
        requests.post(api, json={"name": name}, headers=headers, timeout=30)
    try:
        # The boxes are starting: compare two answers about the same content, which the
        # entity tag (a hash of the uncompressed body) identifies.
        for _ in range(50):
            raw = requests.get(
                api, headers={**headers, "Accept-Encoding": "gzip"}, timeout=30, stream=True
            )
            packed = raw.raw.read()
            plain = requests.get(
                api, headers={**headers, "Accept-Encoding": "identity"}, timeout=30
            )
            if raw.headers["ETag"] == plain.headers["ETag"]:
                break
        assert raw.headers["ETag"] == plain.headers["ETag"]
        assert raw.headers["Content-Encoding"] == "gzip"
        assert "Content-Encoding" not in plain.headers
        assert json.loads(gzip.decompress(packed)) == plain.json()
        assert len(packed) < len(plain.content)
    finally:
        for name in names:
            requests.delete(f"{api}/{name}", params={"purge": "true"}, headers=headers, timeout=30)


def test_polled_reads_answer_like_the_routes(controller: Controller) -> None:
    """The polled reads are answered before routing; names, errors and metrics are the
    routes' own."""
    api = f"{controller.url}/api/v1/devboxes"
    headers = controller.headers()
    name = f"fast-{uuid.uuid4().hex[:6]}"
    assert requests.post(api, json={"name": name}, headers=headers, timeout=30).status_code == 201
    try:
        # Once ready the box's status holds still, so both reads see the same version.
        ready = {"wait": "ready", "timeout": 120}
        requests.get(f"{api}/{name}", params=ready, headers=headers, timeout=150)
        box = requests.get(f"{api}/{name}", headers=headers, timeout=30)
        folded = requests.get(f"{api}/{name.upper()}", headers=headers, timeout=30)
        assert folded.status_code == 200
        assert folded.headers["ETag"] == box.headers["ETag"]
        assert box.headers["Cache-Control"] == "no-store"
        missing = requests.get(f"{api}/no-such-box", headers=headers, timeout=30)
        assert missing.status_code == 404
        assert missing.json() == {"detail": "devbox 'no-such-box' not found"}
        invalid = requests.get(f"{api}/not_a_name", headers=headers, timeout=30)
        assert invalid.status_code == 422
        unauthenticated = requests.get(f"{api}/{name}", timeout=30)
        assert unauthenticated.status_code == 401
        metrics = requests.get(f"{controller.url}/metrics", headers=headers, timeout=30).text
        for route in ("/api/v1/devboxes/{name}", "/api/v1/devboxes", "/api/v1/capabilities"):
            requests.get(f"{controller.url}{route.format(name=name)}", headers=headers, timeout=30)
        after = requests.get(f"{controller.url}/metrics", headers=headers, timeout=30).text
        for route in ("/api/v1/devboxes/{name}", "/api/v1/devboxes", "/api/v1/capabilities"):
            label = f'devboxes_http_requests_total{{method="GET",route="{route}",status="200"}}'
            assert _sample(after, label) == _sample(metrics, label) + 1
    finally:
        requests.delete(f"{api}/{name}", params={"purge": "true"}, headers=headers, timeout=30)


def _sample(metrics: str, label: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(label):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
