"""The /v1 API in process (TestClient) over SQLite and PostgreSQL: answers, errors, uploads."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import pytest
from helpers.server_testing import Seeder, bearer, make_client, post_upload
from sqlalchemy import func, select

from octune.api.client import session_uploads
from octune.catalogue.family import MAX_DIM
from octune.cli.serve import LOOPBACK_NAMES, _loopback
from octune.core.problem import kernel_version_sha256
from octune.core.results import CONFIRM_STRATEGY, Measurement, Status
from octune.db.models import ApiToken, MeasurementRow, SessionUpload
from octune.db.server_store import ServerStore
from octune.kernels.gemm import gemm_query, gemm_workload
from octune.lookup.tables import StoreLookup
from octune.server.tokens import token_hash

W64 = gemm_workload(64, 64, 64)
W256 = gemm_workload(256, 256, 256)


def lookup(client, device, **shape):
    return client.get("/v1/lookup", params={"kernel": "gemm", "device": device, **shape})


def test_exact_nearest_default_follow_the_shared_lookup(client, seeder: Seeder, store, device_info):
    seeder.session(W64, [5, 6, 7], failed=2)
    seeder.session(W256, [9, 10])
    fp = device_info.fingerprint
    shared = StoreLookup(store)
    device = shared.device(fp)
    for shape, match in (
        ((64, 64, 64), "exact"),
        ((100, 70, 60), "nearest"),
        ((250, 256, 300), "nearest"),
    ):
        m, n, k = shape
        response = lookup(client, fp, m=m, n=n, k=k)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["match"] == match
        assert answer == shared.lookup(device, gemm_query(m, n, k)).to_dict()
    exact = lookup(client, fp, m=64, n=64, k=64).json()
    assert exact["config"] == seeder.table.config(5)
    assert exact["time_s"] == pytest.approx(1e-3)
    assert exact["build_options"].startswith("-DTRANSA=0 -DTRANSB=0 -DMWG=")
    assert lookup(client, fp, m=250, n=256, k=300).json()["source"]["workload_key"] == W256.key


def test_device_by_name_and_default_without_results(client, seeder, device_info):
    seeder.session(W64, [3])
    answer = lookup(client, device_info.name, m=8, n=8, k=8, transa=True).json()
    assert answer["device_fingerprint"] == device_info.fingerprint
    assert answer["match"] == "nearest"  # the NN result is legal for TN too, two octaves off
    assert answer["defines"]["TRANSA"] == 1


def test_an_exact_name_resolves_beside_a_longer_one_that_contains_it(
    client, store, seeder, device_info
):
    """PoCL's "pthread-AMD EPYC" and Intel's "AMD EPYC" tuned into one database: each exact
    name answers for its own device, and the shared substring is ambiguous, naming both.
    """
    seeder.session(W64, [3])
    longer = replace(device_info, name=f"pthread-{device_info.name}", driver_version="other")
    Seeder(store, longer, seeder.kernel, seeder.table).session(W64, [4])
    for device in (device_info, longer):
        answer = lookup(client, device.name, m=64, n=64, k=64)
        assert answer.status_code == 200, answer.text
        assert answer.json()["device_fingerprint"] == device.fingerprint
    ambiguous = lookup(client, device_info.name[1:], m=64, n=64, k=64)
    assert ambiguous.status_code == 422, ambiguous.text
    message = ambiguous.json()["message"]
    assert "several" in message
    assert device_info.fingerprint in message and longer.fingerprint in message


def test_batch_answers_in_order(client, seeder, device_info):
    seeder.session(W64, [5])
    seeder.session(W256, [9])
    workloads = [
        {"m": 256, "n": 256, "k": 256},
        {"m": 64, "n": 64, "k": 64},
        {"m": 70, "n": 64, "k": 64, "transb": True},
    ] * 10
    response = client.post(
        "/v1/lookup/batch",
        json={"kernel": "gemm", "device": device_info.fingerprint, "workloads": workloads},
    )
    assert response.status_code == 200, response.text
    answers = response.json()["answers"]
    assert [a["shape"]["m"] for a in answers] == [w["m"] for w in workloads]
    assert [a["match"] for a in answers[:3]] == ["exact", "exact", "nearest"]
    assert answers[2]["shape"]["transb"] == 1


def test_cached_batches_answer_like_the_app_and_anything_else_reaches_it(
    store, seeder, device_info, read_token
):
    """With every answer cached, a batch is answered before FastAPI (``CachedLookups``): the
    same bytes; an invalid body, an uncached workload or a missing token still reach the app.
    """
    seeder.session(W64, [5])
    fp = device_info.fingerprint
    body = {
        "kernel": "gemm",
        "device": fp,
        "workloads": [{"m": 64, "n": 64, "k": 64}, {"m": 70, "n": 64, "k": 64}],
    }
    with make_client(store, cache_check_s=3600.0) as client:
        assert client.app.state.lookups.cached_batch(json.dumps(body).encode()) is None
        first = client.post("/v1/lookup/batch", json=body)
        assert first.status_code == 200, first.text
        client.app.state.lookups.model.wait()  # a model swapped in would drop cached answers
        assert client.app.state.lookups.cached_batch(json.dumps(body).encode()) == first.content
        assert client.post("/v1/lookup/batch", json=body).content == first.content
        more = {**body, "workloads": [*body["workloads"], {"m": 8, "n": 8, "k": 8}]}
        answers = client.post("/v1/lookup/batch", json=more).json()["answers"]
        assert json.dumps({"answers": answers[:2]}, separators=(",", ":")) == first.text
        for bad, fragment in (
            ({**body, "workloads": []}, "workloads: List should have at least 1 item"),
            ({**body, "workloads": [{"m": 0, "n": 1, "k": 1}]}, "gemm m=0 is out of range"),
            ({**body, "extra": 1}, "extra: Extra inputs are not permitted"),
        ):
            response = client.post("/v1/lookup/batch", json=bad)
            assert response.status_code == 422, response.text
            assert fragment in response.json()["message"]
        for content, kind in ((b"{", "application/json"), (json.dumps(body), "text/plain")):
            response = client.post(
                "/v1/lookup/batch", content=content, headers={"Content-Type": kind}
            )
            assert response.status_code == 422, response.text
    with make_client(store, cache_check_s=3600.0, require_read_token=True) as client:
        assert client.post("/v1/lookup/batch", json=body, headers=bearer(read_token)).is_success
        assert client.post("/v1/lookup/batch", json=body).status_code == 401


def test_unknown_device_and_kernel_are_404_with_closest_names(client, seeder, device_info):
    seeder.session(W64, [5])
    typo = device_info.fingerprint[:-1] + "x"
    response = lookup(client, typo, m=1, n=1, k=1)
    assert response.status_code == 404
    assert device_info.fingerprint in response.json()["message"]
    response = client.get(
        "/v1/lookup",
        params={
            "device": device_info.fingerprint,
            "kernel": "gemn",
            "m": 1,
            "n": 1,
            "k": 1,
        },
    )
    assert response.status_code == 404
    assert response.json()["message"].startswith("unknown kernel 'gemn': closest: gemm")


def test_a_built_in_network_has_a_dashboard_page_per_device(client, seeder, device_info):
    """The page `octune report --model resnet18 --html` writes, from the server's database:
    its fc layer (GEMM 1x1000x512, B transposed) tuned, the other layers not.
    """
    seeder.session(gemm_workload(1, 1000, 512, transb=True), [5, 6])
    fp = device_info.fingerprint
    home = client.get("/").text
    assert f'href="/dashboard/models/resnet18?device={fp}"' in home
    assert f'href="/dashboard/models/squeezenet1.1?device={fp}"' in home

    response = client.get("/dashboard/models/resnet18", params={"device": device_info.name})
    assert response.status_code == 200, response.text
    page = response.text
    assert f"<h1>resnet18 on {device_info.name}</h1>" in page
    fc = re.search(r'<tr class="measured">\s*<td title="fc">fc</td>.*?</tr>', page, re.S)
    assert fc is not None and '<span class="kind exact">exact</span>' in fc.group(0)
    assert "1 of 12 distinct layers tuned exactly" in page  # resnet18: 11 convs and the fc
    assert '<script src="/static/plotly.min.js">' in page  # served, not inlined as in a file
    assert client.get("/static/plotly.min.js").headers["content-type"].startswith("text/javas")


@pytest.mark.parametrize(
    ("path", "params", "status", "fragment"),
    [
        ("resnet5", {"device": "FP"}, 404, "unknown model 'resnet5': did you mean 'resnet50'?"),
        # A file's name is never opened: built-in networks only.
        ("model.onnx", {"device": "FP"}, 404, "built-in networks squeezenet1.1, mobilenet_v1"),
        ("resnet18", {"device": "no-such-gpu"}, 404, "unknown device 'no-such-gpu'"),
        ("resnet18", {}, 422, "device: Field required"),
    ],
)
def test_a_dashboard_page_of_an_unknown_model_or_device_says_which(
    client, seeder, device_info, path, params, status, fragment
):
    seeder.session(W64, [5])
    params = {key: device_info.fingerprint if value == "FP" else value
              for key, value in params.items()}  # fmt: skip
    response = client.get(f"/dashboard/models/{path}", params=params)
    assert response.status_code == status
    assert fragment in response.json()["message"]


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"m": 0, "n": 1, "k": 1}, "gemm m=0 is out of range: use 1..1048576"),
        ({"m": MAX_DIM + 1, "n": 1, "k": 1}, f"gemm m={MAX_DIM + 1} is out of range"),
        ({"m": "ten", "n": 1, "k": 1}, "Input should be a valid integer"),
        ({"n": 1, "k": 1}, "missing: m"),
        ({"m": 1, "n": 1, "k": 1, "dtype": "float64"}, "dtype: Input should be 'float32'"),
        ({"m": 1, "n": 1, "k": 1, "mm": 1}, "unknown: mm"),
    ],
)
def test_bad_lookups_are_422_with_the_field(client, device_info, params, fragment):
    response = lookup(client, device_info.fingerprint, **params)
    assert response.status_code == 422
    assert fragment in response.json()["message"]


def test_oversized_batch_and_body_are_refused(store, device_info):
    with make_client(store, max_body_bytes=4096) as client:
        many = {"kernel": "gemm", "device": "x", "workloads": [{"m": 1, "n": 1, "k": 1}] * 1025}
        response = client.post("/v1/lookup/batch", json=many)
        assert response.status_code == 413
        assert "over 4096 bytes" in response.json()["message"]
        chunks = (
            b'{"kernel": "gemm", "device": "x", "workloads": [' + b" " * 1000 for _ in range(8)
        )
        response = client.post(
            "/v1/lookup/batch", content=chunks, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 413
    with make_client(store) as client:
        response = client.post("/v1/lookup/batch", json=many)
        assert response.status_code == 422
        assert "at most 1024 items" in response.json()["message"]


def test_devices_kernel_source_health(client, seeder, device_info, gemm_kernel):
    seeder.session(W64, [5])
    seeder.session(W256, [9])
    (device,) = client.get("/v1/devices").json()
    assert device["fingerprint"] == device_info.fingerprint
    assert device["kernels"] == [{"name": "gemm", "sha256": gemm_kernel.sha256, "workloads": 2}]
    source = client.get(f"/v1/kernels/{gemm_kernel.sha256}").json()
    assert source["template_source"] == gemm_kernel.source
    assert client.get(f"/v1/kernels/{'0' * 64}").status_code == 404
    assert client.get("/v1/kernels/../../etc/passwd").status_code == 404
    assert client.get("/v1/kernels/ABC").status_code == 422
    assert client.get("/v1/health").json() == {"status": "ok"}
    assert client.get("/v1/ready").json()["schema_revision"] == "0008"


def test_upload_is_idempotent_resumable_and_invalidates(
    client, store, write_token, other_device, gemm_kernel, gemm_table, tmp_path
):
    with ServerStore(f"sqlite:///{tmp_path / 'tuner.db'}") as tuner:
        local = Seeder(tuner, other_device, gemm_kernel, gemm_table).session(
            W64, [5, 6, 7, 8], failed=1
        )
        (upload,) = session_uploads(tuner, local)
    assert lookup(client, other_device.name, m=64, n=64, k=64).status_code == 404
    partial = upload.model_copy(update={"measurements": upload.measurements[:2]})
    first = post_upload(client, partial, write_token)
    assert first.status_code == 200, first.text
    assert first.json()["added"] == 2
    answer = lookup(client, other_device.name, m=64, n=64, k=64).json()
    assert (answer["match"], answer["device_fingerprint"]) == ("exact", other_device.fingerprint)
    again = post_upload(client, upload, write_token).json()
    assert (again["added"], again["already_stored"]) == (3, 2)
    assert again["session_id"] == first.json()["session_id"]
    repeat = post_upload(client, upload, write_token).json()
    assert (repeat["added"], repeat["already_stored"]) == (0, 5)
    with store._session() as session:
        rows = session.scalars(
            select(MeasurementRow.config_key).where(
                MeasurementRow.session_id == again["session_id"]
            )
        ).all()
    assert len(rows) == len(set(rows)) == 5


def test_upload_needs_a_write_token_and_valid_content(
    client, store, seeder, write_token, read_token
):
    (upload,) = session_uploads(store, seeder.session(W64, [5]))
    assert post_upload(client, upload, None).status_code == 401
    assert post_upload(client, upload, "oct_nope").status_code == 401
    response = post_upload(client, upload, read_token)
    assert response.status_code == 403
    assert "read-only" in response.json()["message"]
    forged = upload.model_copy(deep=True)
    forged.kernel.template_source += "\n// edited"
    response = post_upload(client, forged, write_token)
    assert response.status_code == 422
    assert "kernel.sha256" in response.json()["message"]
    odd = upload.model_copy(deep=True)
    odd.measurements[0].config = {"TILE": 4}
    response = post_upload(client, odd, write_token)
    assert response.status_code == 422
    assert "MWG" in response.json()["message"]
    moved = upload.model_copy(deep=True)
    assert post_upload(client, upload, write_token).status_code == 200
    moved.workload.m = 65  # type: ignore[attr-defined]
    for m in moved.measurements:  # consistent with its workload: only the uid is reused
        m.flops = gemm_workload(65, 64, 64).flops
    response = post_upload(client, moved, write_token)
    assert response.status_code == 409


def test_an_injected_kernel_source_is_refused_and_never_served(
    client, store, seeder, write_token, device_info
):
    """Issue 45: the real GEMM template plus one line, its hash recomputed, was stored, then
    answered by lookups and served by /v1/kernels to every client that compiled it.
    """
    (upload,) = session_uploads(store, seeder.session(W64, [5]))
    injected = upload.model_copy(deep=True)
    injected.kernel.template_source += '\n#include "/etc/passwd"\n'
    injected.kernel.sha256 = kernel_version_sha256(
        injected.kernel.template_source, injected.kernel.space_source
    )
    response = post_upload(client, injected, write_token)
    assert response.status_code == 422, response.text
    assert "octune --kernel-dir DIR serve" in response.json()["message"]
    assert client.get(f"/v1/kernels/{injected.kernel.sha256}").status_code == 404
    answer = lookup(client, device_info.fingerprint, m=64, n=64, k=64).json()
    assert answer["kernel_sha256"] == upload.kernel.sha256
    assert post_upload(client, upload, write_token).status_code == 200  # the real one is taken


def test_tokens_are_stored_as_hashes_and_reads_can_require_one(store, read_token, write_token):
    with store._session() as session:
        rows = session.scalars(select(ApiToken)).all()
    stored = {(row.name, row.scope, row.sha256) for row in rows}
    assert stored == {
        ("runtime", "read", token_hash(read_token)),
        ("tuner", "trusted", token_hash(write_token)),
    }
    assert all(read_token not in repr(vars(row)) for row in rows)
    with make_client(store, require_read_token=True) as client:
        assert client.get("/v1/devices").status_code == 401
        assert client.get("/").status_code == 401
        assert client.get("/v1/health").status_code == 200
        assert client.get("/v1/devices", headers=bearer(read_token)).status_code == 200
        assert client.get("/v1/devices", headers=bearer(write_token)).status_code == 200
        ready = client.get("/v1/ready").json()
        assert ready["status"] == "ready" and ready["database"] is None  # where data lives
    with make_client(store) as client:
        assert client.get("/v1/ready").json()["database"] == store.url


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (lambda table: {"times_s": [1e-300] * 3}, "measurements.0.times_s"),
        (lambda table: {"times_s": []}, "measurements.0.times_s"),
        (lambda table: {"flops": 10**15}, "measurements.0.flops"),
        (lambda table: {"max_error": 5.0}, "measurements.0.max_error"),
        (lambda table: {"config": {**table.config(5), "MWG": 4096}}, "measurements.0.config"),
    ],
)
def test_a_write_token_cannot_poison_the_answers(
    client, store, seeder, write_token, gemm_table, changes, field
):
    """A config outside the kernel version's space on the device, or a passing result no
    device could produce, is refused with 422 naming the field, and nothing is stored.
    """
    (upload,) = session_uploads(store, seeder.session(W64, [5]))
    poisoned = upload.model_copy(deep=True)
    for name, value in changes(gemm_table).items():
        setattr(poisoned.measurements[0], name, value)
    response = post_upload(client, poisoned, write_token)
    assert response.status_code == 422, response.text
    assert response.json()["message"].startswith(field)
    with store._session() as session:
        assert session.scalar(select(func.count(SessionUpload.id))) == 0


def test_shapes_the_tuner_refuses_are_not_answered(client, seeder, device_info):
    seeder.session(W64, [5])
    huge = lookup(client, device_info.fingerprint, m=2**20, n=2**20, k=64)
    assert huge.status_code == 422
    assert "beyond 32-bit indexing" in huge.json()["message"]
    batch = client.post(
        "/v1/lookup/batch",
        json={
            "kernel": "gemm",
            "device": device_info.fingerprint,
            "workloads": [{"m": 2**20, "n": 2**20, "k": 1}],
        },
    )
    assert batch.status_code == 422


def test_repeated_lookups_follow_new_measurements(store, seeder, device_info, write_token):
    """Repeats are answered from the cache; an upload drops it at once, a measurement written
    straight into the database within the check interval."""
    seeder.session(W64, [5, 6])
    with make_client(store, cache_check_s=0.2) as client:
        params = {"kernel": "gemm", "device": device_info.fingerprint, "m": 64, "n": 64, "k": 64}
        first = client.get("/v1/lookup", params=params)
        assert client.get("/v1/lookup", params=params).content == first.content
        assert first.json()["config"] == seeder.table.config(5)
        (upload,) = session_uploads(store, seeder.session(W64, [7]))
        faster = upload.model_copy(deep=True)
        faster.uid = "another-session-uid"
        faster.measurements[0].times_s = [1e-4] * 3
        assert post_upload(client, faster, write_token).json()["added"] == 1
        assert client.get("/v1/lookup", params=params).json()["config"] == seeder.table.config(7)
        session_id = seeder.session(W64, [8])
        store.add_measurement(session_id, Measurement(seeder.table.config(9), Status.OK,
                                                      (5e-5,) * 3, flops=W64.flops))  # fmt: skip
        time.sleep(0.3)  # written straight into the database: seen at the next check
        assert client.get("/v1/lookup", params=params).json()["config"] == seeder.table.config(9)


def test_a_loopback_server_answers_only_its_loopback_names(store):
    """Issue 45: a page whose DNS name is rebound to 127.0.0.1 reaches a loopback server from
    the user's browser with its own name in the Host header; it is refused.
    """
    client = make_client(store, allowed_hosts=LOOPBACK_NAMES)
    assert client.get("http://127.0.0.1:8000/v1/health").status_code == 200
    assert client.get("http://localhost/v1/health").status_code == 200
    assert client.get("http://rebound.example:8000/v1/health").status_code == 400
    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("192.168.1.5")


def test_lookups_answer_each_dtype_from_its_own_kernels(client, store, device_info):
    """An int8 tuning answers int8 queries exactly; float32 and float16 queries of the same
    shape never get its config (a default of their own dtype's kernels instead), and the
    batch lookup keys by dtype as well.
    """
    from helpers.server_testing import Seeder

    from octune.catalogue.registry import load_kernel
    from octune.kernels.gemm import FAMILY

    kernel = load_kernel("gemm_int8")
    int8 = FAMILY.workload({"m": 64, "n": 64, "k": 64}, "int8")
    Seeder(store, device_info, kernel, kernel.space.enumerate(device_info.limits)).session(
        int8, [4, 5]
    )
    fp = device_info.fingerprint
    answers = {
        dtype: lookup(client, fp, m=64, n=64, k=64, dtype=dtype).json()
        for dtype in ("int8", "float16", "float32")
    }
    assert (answers["int8"]["match"], answers["int8"]["kernel"]) == ("exact", "gemm_int8")
    assert answers["int8"]["dtype"] == "int8"
    assert answers["float16"]["match"] == "default"
    assert answers["float16"]["kernel"] == "gemm_panel_float16"
    assert answers["float32"]["match"] == "default"
    assert answers["float32"]["kernel"] not in ("gemm_int8", "gemm_panel_float16")
    bad = lookup(client, fp, m=64, n=64, k=64, dtype="bfloat16")
    assert bad.status_code == 422 and "float16" in bad.text
    batch = client.post("/v1/lookup/batch", json={"device": fp, "kernel": "gemm", "workloads": [
        {"m": 64, "n": 64, "k": 64, "dtype": "int8"}, {"m": 64, "n": 64, "k": 64}]})  # fmt: skip
    assert batch.status_code == 200, batch.text
    kernels = [a["kernel"] for a in batch.json()["answers"]]
    assert kernels[0] == "gemm_int8" and kernels[1] != "gemm_int8"


def test_the_dashboard_shows_what_lookups_answer_not_a_lucky_run(client, seeder, device_info):
    """A search's fastest single run (0.5 ms) that its confirmation measured at 1 ms: the
    dashboard and the REST lookup both show the confirmed 1 ms, the figure `best` ranks first.
    """
    seeder.session(W64, [5, 6], milliseconds=[0.5, 2.0])
    seeder.session(W64, [5], milliseconds=[1.0], strategy=CONFIRM_STRATEGY)
    answer = lookup(client, device_info.fingerprint, m=64, n=64, k=64).json()
    confirmed = W64.flops / 1e-3 / 1e9
    assert answer["match"] == "exact" and answer["gflops"] == pytest.approx(confirmed)
    home = client.get("/").text
    tuned = home[home.index('<table id="workloads">') :]
    row = re.search(r"<td class=\"num\">([\d.]+)</td><td class=\"num\">(\d+)</td>", tuned)
    assert row is not None and float(row.group(1)) == pytest.approx(confirmed, abs=0.05)
    assert row.group(2) == "3"  # every verified measurement of the workload, counted
    sessions = home[home.index('<table id="sessions">') : home.index("Tuned workloads")]
    assert sessions.count('<tr class="session">') == 1  # the confirmation folded into its search
    best = re.search(r'<td class="num">([\d.]+)</td>\s*<td>yes', sessions)
    assert best is not None and float(best.group(1)) == pytest.approx(confirmed, abs=0.05)


def test_the_api_documentation_is_served_from_the_package(client):
    """Swagger UI and ReDoc with their scripts from this server, not a CDN (an air-gapped
    lab's browser would show a blank page)."""
    for page_url in ("/docs", "/redoc"):
        page = client.get(page_url)
        assert page.status_code == 200 and "cdn" not in page.text.lower()
        scripts = re.findall(r'(?:src|href)="(/static[^"]+)"', page.text)
        assert any(name.endswith(".js") for name in scripts), page_url
        for name in scripts:
            assert client.get(name).status_code == 200, name
    assert client.get("/openapi.json").json()["info"]["title"] == "octune config service"


def test_families_and_their_shape_keys_are_documented(client, seeder, device_info):
    """GET /v1/families lists each family's keys; GET /v1/lookup declares them as query
    parameters, so a generated client or "Try it out" can send a shape; each family's
    example lookup answers as written.
    """
    seeder.session(W64, [5])
    listed = {f["name"]: f for f in client.get("/v1/families").json()}
    assert {"gemm", "conv2d"} <= set(listed)
    gemm = listed["gemm"]
    assert [key["name"] for key in gemm["shape"]][:3] == ["m", "n", "k"]
    assert "gemm_int8" in gemm["kernels"] and "int8" in gemm["dtypes"]
    spec = client.get("/openapi.json").json()
    declared = {p["name"]: p for p in spec["paths"]["/v1/lookup"]["get"]["parameters"]}
    for family in listed.values():
        for key in family["shape"]:
            assert f"{family['name']}: {key['help']}" in declared[key["name"]]["description"]
    assert declared["m"]["schema"]["type"] == "integer"
    for family in listed.values():
        example = family["example"].replace("DEVICE", device_info.fingerprint)
        answer = client.get(example)
        assert answer.status_code == 200, answer.text
        assert answer.json()["kernel"] in family["kernels"]


def test_every_runtime_facing_schema_has_an_example_that_validates():
    from octune.api import schemas

    for name in ("LookupAnswer", "BatchLookup", "BatchAnswer", "DeviceOut", "FamilyOut",
                 "ProblemDetails", "Health", "Readiness", "JobSubmitIn"):  # fmt: skip
        model = getattr(schemas, name)
        examples = model.model_json_schema()["examples"]
        assert examples, name
        for example in examples:
            model.model_validate(example)


def test_a_batch_error_names_its_item(client, seeder, device_info):
    seeder.session(W64, [5])
    workloads = [{"m": 64, "n": 64, "k": 64}, {"m": 2**20, "n": 2**20, "k": 1}]
    body = {"device": device_info.fingerprint, "kernel": "gemm", "workloads": workloads}
    shape = client.post("/v1/lookup/batch", json=body)
    assert shape.status_code == 422
    assert shape.json()["message"].startswith("workloads[1]: "), shape.text
    workloads[1] = {"m": "a", "n": 1, "k": 1}
    form = client.post("/v1/lookup/batch", json=body)
    assert form.status_code == 422
    assert form.json()["message"].startswith("workloads[1].m: "), form.text


def test_a_full_answer_cache_drops_its_oldest_answers_only(store, seeder, device_info, monkeypatch):
    from octune.server import lookups

    monkeypatch.setattr(lookups, "MAX_ANSWERS", 3)
    seeder.session(W64, [5])
    with make_client(store, cache_check_s=60.0) as client:
        service = client.app.state.lookups
        for m in (8, 16, 32, 64, 128):
            assert lookup(client, device_info.fingerprint, m=m, n=64, k=64).status_code == 200
        cached = [dict(key[3])["m"] for key in service._answers]
        assert cached == [32, 64, 128]  # the newest three; the others dropped one by one


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x07", "\u202e"])
def test_device_names_are_printable_as_agent_names_are(client, store, seeder, write_token, char):
    (upload,) = session_uploads(store, seeder.session(W64, [5]))
    odd = upload.model_copy(deep=True)
    odd.device.name = f"GPU{char}name"
    response = post_upload(client, odd, write_token)
    assert response.status_code == 422
    assert response.json()["message"] == (
        "device.name: Value error, must be printable: no control or format characters"
    )


def test_a_name_two_stored_devices_share_answers_for_the_newer(client, store, seeder,
                                                              device_info):  # fmt: skip
    """Issue 61: a second device of an existing name (a driver update stores a new one) made
    every by-name lookup of that name a 422.
    """
    from helpers.server_testing import Seeder

    seeder.session(W64, [5])
    updated = replace(device_info, driver_version=device_info.driver_version + ".1")
    assert updated.fingerprint != device_info.fingerprint
    Seeder(store, updated, seeder.kernel, seeder.table).session(W64, [6])
    answer = lookup(client, device_info.name, m=64, n=64, k=64)
    assert answer.status_code == 200, answer.text
    assert answer.json()["device_fingerprint"] == updated.fingerprint
    assert answer.json()["config"] == seeder.table.config(6)
    assert lookup(client, device_info.fingerprint, m=64, n=64, k=64).json()["config"] == (
        seeder.table.config(5)
    )


@pytest.mark.parametrize(
    ("layer", "fragment"),
    [
        ({"family": "nope", "shape": {"m": 1}}, "layers[0].family: no family 'nope'"),
        ({"family": "gemm", "shape": {"m": 0, "n": 1, "k": 1}}, "layers[0]: gemm m=0 is out"),
        ({"family": "gemm", "shape": {"m": 1, "n": 1, "k": 1, "q": 2}}, "no parameter q"),
        (
            {"family": "gemm", "shape": {"m": 1, "n": 1, "k": 1}, "nodes": ["a\x1bb"]},
            "must be printable",
        ),
    ],
)
def test_a_network_upload_is_checked_layer_by_layer(client, write_token, layer, fragment):
    body = {"name": "net.onnx", "layers": [{"count": 1, "nodes": ["fc"], **layer}]}
    refused = client.post("/v1/networks", json=body, headers=bearer(write_token))
    assert refused.status_code == 422 and fragment in refused.json()["message"], refused.text
    assert client.post("/v1/networks", json=body).status_code == 401


def test_neighbours_are_the_shared_lookups_and_bounded(client, seeder, store, device_info):
    """``GET /v1/neighbours``: what a runtime confirms beside the answer at first use, the
    same configs a database or a bundle gives (``KernelIndex.neighbours``); a family, a bad
    count or version, an unknown kernel are refused in one line.
    """
    seeder.session(W64, [5, 6, 7])
    seeder.session(W256, [9, 10])
    seeder.session(gemm_workload(1024, 1024, 1024), [12])
    fp, kernel = device_info.fingerprint, seeder.kernel
    shape = {"m": 100, "n": 100, "k": 100}
    params = {"device": fp, "kernel": kernel.name, **shape}
    response = client.get("/v1/neighbours", params={**params, "count": 3})
    assert response.status_code == 200, response.text
    found = response.json()
    index = StoreLookup(store).index(StoreLookup(store).device(fp), kernel.name)
    expected = index.neighbours(gemm_query(100, 100, 100), 3)
    assert found["kernel_sha256"] == kernel.sha256
    assert [tuple(c.values()) for c in found["configs"]] == expected
    assert found["configs"][0] == seeder.table.config(5)  # the nearest tuned shape's best
    assert len(found["configs"]) == 3
    assert found["predicted"] is None  # six measurements: no model to pick with
    pinned = client.get("/v1/neighbours", params={**params, "kernel_sha256": kernel.sha256})
    assert pinned.json()["configs"] == found["configs"]
    for bad, status, fragment in (
        ({"count": 17}, 422, "count"),
        ({"count": 0}, 422, "count"),
        ({"kernel_sha256": "abc"}, 422, "kernel_sha256"),
        ({"kernel": "conv2d"}, 422, "is a family"),
        ({"kernel": "gemn"}, 404, "closest: gemm"),
        ({"m": 0}, 422, "m=0 is out of range"),
    ):
        response = client.get("/v1/neighbours", params={**params, **bad})
        assert response.status_code == status, (bad, response.text)
        assert fragment in response.text, (bad, response.text)
