"""The job queue's lease logic through the API (FastAPI's TestClient) and, for races, from
many threads at once, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import glob
import threading
import time
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from helpers.cli_testing import octune
from helpers.farm_testing import WORKLOADS, device_in, session_statuses
from helpers.server_testing import bearer

from octune.api.client import session_body
from octune.db.job_queue import QueueError
from octune.server.app import create_app
from octune.server.settings import ServerSettings
from octune.server.tokens import create_token, token_hash


@pytest.fixture
def client(store):
    app = create_app(ServerSettings(database_url="unused://", predict=False, lease_s=30), store)
    with TestClient(app) as client:
        yield client


@pytest.fixture
def write(store) -> dict[str, str]:
    return bearer(create_token(store, "farm", "write"))


def token_id(store, headers) -> int:
    return store.token(token_hash(headers["Authorization"].removeprefix("Bearer "))).id


def submit(client, write, **fields) -> dict:
    body = {"devices": "*", "workloads": WORKLOADS, "budget": 4, **fields}
    response = client.post("/v1/jobs", json=body, headers=write)
    assert response.status_code == 200, response.text
    return response.json()


def register(client, write, *infos) -> int:
    body = {"name": "lab", "host": "h", "devices": [device_in(info) for info in infos]}
    response = client.post("/v1/agents", json=body, headers=write)
    assert response.status_code == 200, response.text
    return response.json()["agent_id"]


def lease(client, write, agent_id, info) -> dict:
    response = client.post(
        f"/v1/agents/{agent_id}/lease", json={"device": info.fingerprint}, headers=write
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_a_device_registered_later_gets_the_waiting_job(client, write, device_info):
    nothing = client.post("/v1/jobs", json={"devices": "*", "workloads": WORKLOADS, "budget": 4},
                          headers=write)  # fmt: skip
    assert nothing.status_code == 422
    assert "no device matches '*'" in nothing.json()["message"]
    assert "--wait-for-device" in nothing.json()["message"]
    pattern = "*" + glob.escape(device_info.name)  # the suite's device, on any runtime
    waiting = submit(client, write, devices=pattern, wait_for_device=True)
    assert waiting["waiting"] and waiting["jobs"] == []
    agent = register(client, write, device_info)
    granted = lease(client, write, agent, device_info)
    assert granted["job"]["submission_id"] == waiting["submission_id"]
    assert granted["job"]["device_fingerprint"] == device_info.fingerprint
    assert granted["job"]["lease_epoch"] == 1 and granted["done"] == []
    again = lease(client, write, agent, device_info)  # an answer lost on the way: same lease
    assert again["job"]["id"] == granted["job"]["id"] and again["job"]["lease_epoch"] == 1
    page = client.get("/").text
    assert "1 agent(s) online" in page and "running" in page


def test_patterns_match_fingerprint_name_and_driver(client, write, device_info, other_device):
    register(client, write, device_info, other_device)
    by_fingerprint = submit(client, write, devices=device_info.fingerprint)["jobs"]
    assert [j["device_fingerprint"] for j in by_fingerprint] == [device_info.fingerprint]
    by_driver = submit(client, write, devices=f"* {other_device.driver_version}")["jobs"]
    assert [j["device_name"] for j in by_driver] == [other_device.name]
    both = submit(client, write, devices="*")["jobs"]
    assert len(both) == 2


@pytest.fixture
def other_device(device_info):
    return replace(device_info, name="Mali-G78 MP20", driver_version="r38p1", device_type="gpu")


def test_no_two_agents_hold_one_job(store, device_info):
    """Sixteen agents lease at once, from threads, for eight jobs: each job goes to one."""
    writer = token_id(store, bearer(create_token(store, "farm", "write")))
    store.device_id(device_info)
    for _ in range(8):
        store.submit(devices="*", spec={"workloads": WORKLOADS}, strategy="random",
                     budget_seconds=None, budget_candidates=4, max_attempts=3,
                     token_id=writer, wait_for_device=False)  # fmt: skip
    agents = [store.register_agent(f"a{i}", "h", writer, [device_info]) for i in range(16)]
    granted: list[tuple[int, int]] = []
    barrier = threading.Barrier(len(agents))

    def take(agent_id: int) -> None:
        barrier.wait()
        found = store.lease(agent_id, writer, device_info.fingerprint, 60)
        if found is not None:
            granted.append((found.job.id, agent_id))

    threads = [threading.Thread(target=take, args=(agent,)) for agent in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(job for job, _ in granted) == sorted(j.id for j in store.jobs())
    assert len({agent for _, agent in granted}) == 8


def test_expired_lease_goes_to_another_and_fences_the_first(client, write, store, device_info):
    first, second = register(client, write, device_info), register(client, write, device_info)
    submit(client, write, max_attempts=3)
    writer = token_id(store, write)
    granted = store.lease(first, writer, device_info.fingerprint, 0.0)  # expires at once
    taken = store.lease(second, writer, device_info.fingerprint, 60)
    assert taken is not None and granted is not None
    assert taken.job.id == granted.job.id and taken.job.lease_epoch == 2
    assert taken.job.failures == 1 and "stopped heartbeating" in taken.job.reason
    held = {"agent_id": first, "epoch": 1, "tried_s": 1.0}
    refused = client.post(f"/v1/jobs/{granted.job.id}/heartbeat", json=held, headers=write)
    assert refused.status_code == 409
    assert f"agent {first} does not hold job {granted.job.id}" in refused.json()["message"]
    finished = client.post(f"/v1/jobs/{granted.job.id}/finish", json=held, headers=write)
    assert finished.status_code == 409
    ok = {"agent_id": second, "epoch": 2, "tried_s": 2.0}
    assert client.post(f"/v1/jobs/{taken.job.id}/heartbeat", json=ok, headers=write).is_success
    done = client.post(f"/v1/jobs/{taken.job.id}/finish", json=ok, headers=write).json()
    assert done["status"] == "completed" and done["tried_s"] == 2.0
    repeat = client.post(f"/v1/jobs/{taken.job.id}/finish", json=ok, headers=write)
    assert repeat.json()["status"] == "completed"  # a repeat whose answer was lost


def test_the_server_takes_back_an_expired_lease_by_itself(store, write, device_info):
    """Issue 45: a job whose agent died stayed running while no other agent of its device
    asked for a lease. The server sweeps expired leases (every third of a lease) itself.
    """
    app = create_app(ServerSettings(database_url="unused://", predict=False, lease_s=0.3), store)
    with TestClient(app) as client:
        agent = register(client, write, device_info)
        job_id = submit(client, write, max_attempts=2)["jobs"][0]["id"]
        for status in ("queued", "failed"):
            lease(client, write, agent, device_info)  # then the agent dies: no heartbeat
            deadline = time.monotonic() + 10
            while store.job(job_id).status == "running" and time.monotonic() < deadline:
                time.sleep(0.05)
            job = store.job(job_id)
            assert job.status == status, job
            assert "expired: it stopped heartbeating" in job.reason
        assert store.job(job_id).failures == 2


def test_a_job_that_keeps_crashing_fails_with_the_reason(client, write, store, device_info):
    agent = register(client, write, device_info)
    job_id = submit(client, write, max_attempts=2)["jobs"][0]["id"]
    first = lease(client, write, agent, device_info)["job"]
    crash = {"agent_id": agent, "epoch": first["lease_epoch"],
             "error": "measurer died: CL_OUT_OF_RESOURCES"}  # fmt: skip
    again = client.post(f"/v1/jobs/{job_id}/finish", json=crash, headers=write).json()
    assert again["status"] == "queued" and again["failures"] == 1
    second = lease(client, write, agent, device_info)["job"]
    assert second["lease_epoch"] == 2
    crash["epoch"] = 2
    failed = client.post(f"/v1/jobs/{job_id}/finish", json=crash, headers=write).json()
    assert failed["status"] == "failed" and failed["failures"] == 2
    assert failed["reason"] == "measurer died: CL_OUT_OF_RESOURCES"
    assert lease(client, write, agent, device_info)["job"] is None
    # expiries count alike: a job whose agent keeps dying fails too
    other = submit(client, write, max_attempts=1)["jobs"][0]["id"]
    writer = token_id(store, write)
    assert store.lease(agent, writer, device_info.fingerprint, 0.0).job.id == other
    assert store.lease(agent, writer, device_info.fingerprint, 0.0).job.id == other  # held
    newcomer = register(client, write, device_info)
    assert store.lease(newcomer, writer, device_info.fingerprint, 60) is None
    assert store.job(other).status == "failed"
    assert "stopped heartbeating" in store.job(other).reason


def test_cancelled_job_is_dropped_by_its_agent(client, write, device_info):
    agent = register(client, write, device_info)
    job_id = submit(client, write)["jobs"][0]["id"]
    lease(client, write, agent, device_info)
    cancelled = client.post(f"/v1/jobs/{job_id}/cancel", headers=write).json()
    assert cancelled["status"] == "cancelled"
    beat = client.post(f"/v1/jobs/{job_id}/heartbeat",
                       json={"agent_id": agent, "epoch": 1}, headers=write)  # fmt: skip
    assert beat.status_code == 409 and "cancelled" in beat.json()["message"]
    assert lease(client, write, agent, device_info)["job"] is None


def upload_body(device_info, gemm_kernel, agent: int, epoch: int) -> dict:
    """One failed candidate of a still running session, as the holder of a lease sends it."""
    record = {
        "device": device_in(device_info),
        "kernel": {"name": gemm_kernel.name, "sha256": gemm_kernel.sha256,
                   "template_source": gemm_kernel.source,
                   "space_source": gemm_kernel.space.source_text},
        "workload": {"problem": "gemm", "dtype": "float32", "m": 16, "n": 16, "k": 16,
                     "transa": 0, "transb": 0},
        "session": {"strategy": "random", "seed": None, "settings": {}, "status": "running",
                    "octune_version": "0"},
    }  # fmt: skip
    config = gemm_kernel.space.enumerate(device_info.limits).config(0)
    failed = {"config": config, "status": "build_error", "times_s": [], "flops": 8192,
              "max_error": None, "message": "error: no", "extra": {}}  # fmt: skip
    return {**session_body(record, [failed], "running"), "agent_id": agent, "epoch": epoch,
            "session_key": 1}  # fmt: skip


def test_uploads_are_idempotent_and_only_from_the_holder(
    client, write, store, device_info, gemm_kernel
):
    agent, intruder = register(client, write, device_info), register(client, write, device_info)
    job_id = submit(client, write)["jobs"][0]["id"]
    lease(client, write, agent, device_info)
    body = upload_body(device_info, gemm_kernel, agent, 1)
    url = f"/v1/jobs/{job_id}/measurements"
    first = client.post(url, json=body, headers=write).json()
    repeat = client.post(url, json=body, headers=write).json()
    assert first["added"] == 1 and repeat == {**first, "added": 0}
    stolen = client.post(url, json={**body, "agent_id": intruder}, headers=write)
    assert stolen.status_code == 409
    assert f"agent {intruder} does not hold job {job_id}" in stolen.json()["message"]
    granted = lease(client, write, agent, device_info)  # what a resumed lease starts from
    assert [len(s["measurements"]) for s in granted["done"]] == [1]
    assert store.job(job_id).candidates == 1


def test_a_dropped_lease_ends_its_sessions(client, write, store, device_info, gemm_kernel):
    """A session whose agent lost the job (killed, its lease taken over; or the job
    cancelled) ends "interrupted": that agent never sends its last status.
    """
    first, second = register(client, write, device_info), register(client, write, device_info)
    job_id = submit(client, write, max_attempts=3)["jobs"][0]["id"]
    writer = token_id(store, write)
    url = f"/v1/jobs/{job_id}/measurements"
    lease(client, write, first, device_info)
    body = upload_body(device_info, gemm_kernel, first, 1)
    assert client.post(url, json=body, headers=write).is_success
    store.heartbeat(job_id, first, writer, 1, 1.0, 0.0)  # then SIGKILLed: the lease expires
    assert session_statuses(store, job_id) == ["running"]
    taken = store.lease(second, writer, device_info.fingerprint, 60)
    assert taken is not None and taken.job.lease_epoch == 2
    assert session_statuses(store, job_id) == ["interrupted"]
    body = upload_body(device_info, gemm_kernel, second, 2)
    assert client.post(url, json=body, headers=write).is_success
    assert session_statuses(store, job_id) == ["interrupted", "running"]
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=write).is_success
    assert session_statuses(store, job_id) == ["interrupted", "interrupted"]


def test_bad_input_is_one_line(client, write, store, tmp_path, device_info):
    register(client, write, device_info)
    read = bearer(create_token(store, "runtime", "read"))

    def job(**body):
        return client.post("/v1/jobs", json={"devices": "*", "budget": 1, **body}, headers=write)

    both = job(model="resnet50", workloads=WORKLOADS)
    assert both.status_code == 422 and "either model or workloads" in both.json()["message"]
    typo = job(model="resnet05")
    assert typo.status_code == 422 and "did you mean 'resnet50'" in typo.json()["message"]
    shape = job(workloads=[{"kernel": "gemm", "m": 0, "n": 1, "k": 1}])
    assert shape.status_code == 422 and "workloads.0" in shape.json()["message"]
    strategy = job(model="resnet50", strategy="annealing")
    assert strategy.status_code == 422 and "unknown strategy" in strategy.json()["message"]
    endless = client.post("/v1/jobs", json={"devices": "*", "model": "resnet50"}, headers=write)
    assert endless.status_code == 422 and "never ends" in endless.json()["message"]
    agent = client.post("/v1/agents", json={"name": "a", "host": "h", "devices": []},
                        headers=read)  # fmt: skip
    assert agent.status_code == 403 and "read-only" in agent.json()["message"]
    assert client.post("/v1/jobs/1/cancel").status_code == 401
    assert client.post("/v1/jobs/99/cancel", headers=write).status_code == 404
    with pytest.raises(QueueError, match="no agent 7"):
        store.lease(7, 1, "0" * 16, 60)
    bad = tmp_path / "bad.yaml"
    bad.write_text("workloads: [{kernel: gemm, m: x}]")
    result = octune("jobs", "submit", "--devices", "*", "--workloads", str(bad), "--budget", "1",
                    "--server", "http://127.0.0.1:9", "--token", "t")  # fmt: skip
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "bad.yaml: workloads.0.m" in result.stderr
    neither = octune("jobs", "submit", "--devices", "*", "--server", "http://127.0.0.1:9")
    assert neither.returncode == 2
    assert (
        neither.stderr == "error: give what to tune: --model NAME or --workloads FILE.yaml (one)\n"
    )
    forever = octune("jobs", "submit", "--devices", "*", "--model", "resnet50", "--server",
                     "http://127.0.0.1:9")  # fmt: skip
    assert forever.returncode == 2 and forever.stderr.count("\n") == 1
    assert "give how long: --time DURATION or --budget N" in forever.stderr


def test_a_write_token_neither_takes_nor_poisons_a_trusted_machines_jobs(
    client, write, store, device_info, gemm_kernel
):
    """Issue 61: a write token registers an agent for the trusted machine's device (the same
    fingerprint). It leases none of the trusted jobs; the job it may lease (its own) is never
    handed to the trusted agent, so its forged results never seed a trusted resume; and it
    cannot cancel a job it did not submit, while a trusted token may cancel any.
    """
    trusted = bearer(create_token(store, "lab-3", "trusted"))
    honest = register(client, trusted, device_info)
    posing = register(client, write, device_info)
    trusted_job = submit(client, trusted)["jobs"][0]["id"]
    assert lease(client, write, posing, device_info)["job"] is None
    own_job = submit(client, write)["jobs"][0]["id"]
    granted = lease(client, write, posing, device_info)
    assert granted["job"]["id"] == own_job
    forged = upload_body(device_info, gemm_kernel, posing, 1)
    url = f"/v1/jobs/{own_job}/measurements"
    assert client.post(url, json=forged, headers=write).is_success
    store.heartbeat(own_job, posing, token_id(store, write), 1, 1.0, 0.0)  # lets it lapse
    mine = lease(client, trusted, honest, device_info)
    assert mine["job"]["id"] == trusted_job and mine["done"] == []
    assert lease(client, trusted, honest, device_info)["job"]["id"] == trusted_job
    # The trusted agent's own uploads do seed its next lease of the job.
    honest_body = upload_body(device_info, gemm_kernel, honest, 1)
    assert client.post(f"/v1/jobs/{trusted_job}/measurements", json=honest_body,
                       headers=trusted).is_success  # fmt: skip
    assert [len(s["measurements"]) for s in lease(client, trusted, honest, device_info)["done"]] \
        == [1]  # fmt: skip

    refused = client.post(f"/v1/jobs/{trusted_job}/cancel", headers=write)
    assert refused.status_code == 403
    assert "submitted with another token" in refused.json()["message"]
    sub = store.job(trusted_job).submission_id
    assert client.post(f"/v1/submissions/{sub}/cancel", headers=write).status_code == 403
    assert client.post(f"/v1/jobs/{trusted_job}/cancel", headers=trusted).is_success
    # The write token's job, its lease lapsed, is still no job for the trusted machine.
    assert lease(client, trusted, honest, device_info)["job"] is None
    assert client.post(f"/v1/jobs/{own_job}/cancel", headers=trusted).is_success  # an admin
