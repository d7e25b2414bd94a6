"""A bounded schemathesis run against the OpenAPI spec: whatever it sends, the server answers
with a documented status and a body that matches its schema, never a 5xx.
"""

from __future__ import annotations

import pytest
import schemathesis
from helpers.server_testing import Seeder, bearer
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from octune.db.server_store import ServerStore
from octune.kernels.gemm import gemm_workload
from octune.server.app import create_app
from octune.server.settings import ServerSettings
from octune.server.tokens import create_token

#: Schema-valid bodies that make no sense (a search space "0", a sha256 of zeros) are
#: rightly 422: the positive-data check cannot know that, every other check runs.
SEMANTIC = checks.positive_data_acceptance
MAX_EXAMPLES = 30  # per operation: bounded, so the run takes seconds, not minutes


@pytest.fixture(scope="module", params=[False, True], ids=["open-reads", "read-token"])
def api(request, tmp_path_factory, device_info, gemm_kernel, gemm_table):
    url = f"sqlite:///{tmp_path_factory.mktemp('schema') / 'octune.db'}"
    with ServerStore(url) as store:
        seeder = Seeder(store, device_info, gemm_kernel, gemm_table)
        seeder.session(gemm_workload(64, 64, 64), [5, 6])
        token = create_token(store, "schemathesis", "write")
        app = create_app(ServerSettings(database_url=url, require_read_token=request.param), store)
        yield schemathesis.openapi.from_asgi("/openapi.json", app), token


def test_api_conforms_to_its_schema(api):
    schema, token = api
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {"GET /v1/lookup", "POST /v1/sessions"}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def conforms(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=bearer(token), excluded_checks=[SEMANTIC])

        conforms()
