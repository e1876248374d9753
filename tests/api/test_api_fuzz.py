"""Fuzz every operation of the published OpenAPI document with schema-valid and
schema-invalid input: no input may cause a 5xx, and every response must conform to the
document (documented status codes and headers, bodies matching their schemas, invalid
input refused, valid input accepted).

The controller runs on a namespace of its own so that boxes the fuzzer manages to
create do not disturb other tests; the namespace goes with everything in it.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
import requests
import schemathesis
from devboxes_controller.box.idempotency import KEY_PATTERN
from devboxes_controller.web.app import MAX_BODY_BYTES
from devboxes_controller.web.paging import ListTokens, Position
from devboxes_testbed.controller import Controller
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode
from support import StartController

from devboxes_sdk.models import IDEMPOTENCY_HEADER

POSITIVE_EXAMPLES = 150
NEGATIVE_EXAMPLES = 60
MIN_CASES = 1000
USAGE_SPAN_RULES = re.compile(
    r"must not be after until|a report covers at most \d+ days|must be a UTC day from"
)


@pytest.fixture
def fuzz_controller(start_controller: StartController) -> Controller:
    return start_controller()


@pytest.fixture
def api_schema(fuzz_controller: Controller) -> Any:
    response = requests.get(
        f"{fuzz_controller.url}/openapi.json", headers=fuzz_controller.headers(), timeout=10
    )
    assert response.status_code == 200, response.text
    return schemathesis.openapi.from_dict(response.json())


def check(case: Any, controller: Controller) -> None:
    if case.query and "timeout" in case.query:
        # A valid timeout holds the request open; cap it so the pass stays short.
        timeout = case.query["timeout"]
        if isinstance(timeout, int | float) and 0 < timeout <= 300:
            case.query["timeout"] = min(timeout, 0.5)
    key = (case.headers or {}).get(IDEMPOTENCY_HEADER)
    if isinstance(key, str) and re.fullmatch(KEY_PATTERN, key):
        # Each generated create is a request of its own: a key sent again with another
        # body is refused by design (the contract tests cover it), and short generated
        # keys repeat. A key that breaks the rule is left as generated.
        case.headers[IDEMPOTENCY_HEADER] = uuid.uuid4().hex
    token = (case.query or {}).get("continue")
    filters = [(case.query or {}).get(name) for name in ("state", "profile", "owner")]
    if isinstance(token, str) and all(f is None or isinstance(f, str) for f in filters):
        # A generated continue token is never one a controller signed, and is refused by
        # design (the paging tests cover it): send one signed for the case's own filters.
        case.query["continue"] = ListTokens(controller.token).issue(Position("", *filters))
    response = case.call(base_url=controller.url, headers=controller.headers(), timeout=30)
    sent = response.request.body or b""
    if response.status_code == 413 and len(sent) > MAX_BODY_BYTES:
        # A string past a field's maxLength, written with JSON escapes, can pass the
        # limit on whole bodies first: that refusal is the documented one.
        assert "request body too large" in response.text
        return
    if (
        response.status_code == 422
        and case.formatted_path == "/api/v1/usage"
        and USAGE_SPAN_RULES.search(response.text)
    ):
        # A report's span has rules between its two days, which a schema cannot say.
        return
    case.validate_response(response, headers=controller.headers())
    described = f"{case.method} {case.formatted_path} {case.query} {case.body!r}"
    assert response.status_code < 500, f"{described} -> {response.status_code} {response.text}"
    assert response.status_code != 401, f"{described}: the right token was refused"


def test_no_input_causes_a_server_error_or_a_nonconforming_answer(
    api_schema: Any, fuzz_controller: Controller
) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 8
    cases = 0
    for operation in operations:
        takes_input = bool(operation.path_parameters or operation.query or operation.body)
        modes = [(GenerationMode.POSITIVE, POSITIVE_EXAMPLES)]
        if takes_input:
            modes.append((GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES))
        for mode, examples in modes:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def fuzz(case: Any) -> None:
                nonlocal cases
                cases += 1
                check(case, fuzz_controller)

            fuzz()
    assert cases >= MIN_CASES
    # Every operation must really have been exercised, not skipped by the generator.
    metrics = requests.get(
        f"{fuzz_controller.url}/metrics", headers=fuzz_controller.headers(), timeout=10
    ).text
    for operation in operations:
        route = f'method="{operation.method.upper()}",route="{operation.path}"'
        assert route in metrics, f"no request reached {operation.method} {operation.path}"
