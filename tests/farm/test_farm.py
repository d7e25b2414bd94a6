"""The tuning farm end to end over real sockets: `octune serve` and several `octune agent`s
as separate processes on this machine's OpenCL device, against SQLite and PostgreSQL. Agents
are killed, frozen past their lease, a server is restarted, a job is cancelled; every job
still finishes, and no measurement is lost or measured twice.
"""

from __future__ import annotations

import signal
import time

import pytest
from helpers.cli_testing import octune
from helpers.farm_testing import (
    WORKLOADS,
    Agent,
    duplicates,
    job,
    job_measurements,
    session_statuses,
    wait_for,
)
from helpers.server_testing import LiveServer

from octune.api.client import OctuneClient
from octune.db.server_store import ServerStore
from octune.server.tokens import create_token
from octune.tuner.device import DeviceInfo, select_device

pytestmark = pytest.mark.slow

ENDED = ("completed", "failed")
FLAGS = ("--lease-seconds", "3", "--no-predict", "--no-access-log")


@pytest.fixture
def farm(db_url, tmp_path):
    with ServerStore(db_url) as store:
        token = create_token(store, "farm", "write")
        server = LiveServer(db_url, tmp_path / "server.log", *FLAGS)
        agents: list[Agent] = []
        try:
            yield server, token, store, agents
        finally:
            for agent in agents:
                agent.stop()
            server.stop()


def submit(server, token, **fields) -> int:
    """A submission for the suite's test device only: an agent drives every device that
    compiles (Intel's CPU runtime beside PoCL, say), and each would get a job of its own.
    """
    body = {"devices": DeviceInfo.from_cl(select_device()).fingerprint, "workloads": WORKLOADS,
            "strategy": "exhaustive", "budget": 12, "wait_for_device": True, **fields}  # fmt: skip
    with OctuneClient(server.url, token) as client:
        return client.submit_job(body).submission_id


def job_of(server, submission_id: int) -> dict | None:
    """The submission's job, once an agent has registered the device."""
    with OctuneClient(server.url) as client:
        found = [j for j in client.jobs() if j.submission_id == submission_id]
    return found[0].model_dump(mode="json") if found else None


def measuring(server, submission_id: int, at_least: int) -> dict:
    """The job, once its agents have uploaded ``at_least`` search candidates."""
    return wait_for(
        lambda: (j := job_of(server, submission_id)) and j["candidates"] >= at_least and j
    )


def finished(server, job_id: int) -> dict:
    return wait_for(lambda: (j := job(server.url, job_id))["status"] in ENDED and j)


def test_a_killed_agent_is_replaced_and_nothing_is_measured_twice(farm, tmp_path):
    server, token, store, agents = farm
    submission = submit(server, token)
    agents.append(Agent(server.url, token, tmp_path / "first.log"))
    job_id = measuring(server, submission, 2)["id"]
    agents[0].kill()  # SIGKILL, its measurer and builders with it
    before = set(job_measurements(store, job_id))
    agents.append(Agent(server.url, token, tmp_path / "second.log"))
    done = finished(server, job_id)
    assert done["status"] == "completed"
    assert done["lease_epoch"] == 2 and done["failures"] == 1
    assert "stopped heartbeating" in done["reason"]
    after = job_measurements(store, job_id)
    assert before <= set(after), "measurements uploaded before the kill were lost"
    assert duplicates(after) == []
    assert len([m for m in after if m[2] != "confirm"]) <= 12
    assert "resuming after" in (tmp_path / "second.log").read_text()
    assert "running" not in session_statuses(store, job_id)  # the killed agent's ended too


def test_a_server_restart_loses_nothing(farm, db_url, tmp_path):
    server, token, store, agents = farm
    submission = submit(server, token)
    agents.append(Agent(server.url, token, tmp_path / "agent.log"))
    job_id = measuring(server, submission, 2)["id"]
    server.stop()
    before = set(job_measurements(store, job_id))
    server.__init__(db_url, tmp_path / "restarted.log", *FLAGS, port=server.port)
    done = finished(server, job_id)
    assert done["status"] == "completed"
    assert done["lease_epoch"] == 1 and done["failures"] == 0  # the agent kept its lease
    after = job_measurements(store, job_id)
    assert before <= set(after)
    assert duplicates(after) == []


def test_a_frozen_agent_loses_its_lease_and_is_refused(farm, tmp_path):
    server, token, store, agents = farm
    submission = submit(server, token)
    agents.append(Agent(server.url, token, tmp_path / "frozen.log"))
    job_id = measuring(server, submission, 2)["id"]
    agents[0].signal(signal.SIGSTOP)  # past its lease: as a machine that hangs
    agents.append(Agent(server.url, token, tmp_path / "other.log"))
    wait_for(lambda: job(server.url, job_id)["lease_epoch"] == 2)
    agents[0].signal(signal.SIGCONT)
    done = finished(server, job_id)
    assert done["status"] == "completed" and done["failures"] == 1
    wait_for(lambda: f"job {job_id}: dropped" in (tmp_path / "frozen.log").read_text())
    assert duplicates(job_measurements(store, job_id)) == []


def test_a_cancelled_job_stops_and_the_agent_takes_the_next(farm, tmp_path):
    server, token, store, agents = farm
    long = submit(server, token, budget=None, time_s=600)
    agents.append(Agent(server.url, token, tmp_path / "agent.log"))
    job_id = measuring(server, long, 1)["id"]
    short = submit(server, token, budget=4)
    cancelled = octune("jobs", "cancel", str(job_id), "--server", server.url, "--token", token)
    assert cancelled.returncode == 0, cancelled.stderr
    stored = len(job_measurements(store, job_id))
    next_job = wait_for(lambda: (j := job_of(server, short)) and j["status"] == "completed" and j)
    assert next_job["failures"] == 0
    assert job(server.url, job_id)["status"] == "cancelled"
    assert len(job_measurements(store, job_id)) == stored  # nothing stored after the cancel
    assert "running" not in session_statuses(store, job_id)
    assert f"job {job_id}: dropped" in (tmp_path / "agent.log").read_text()


def test_a_write_tokens_agent_gets_no_trusted_job(farm, tmp_path):
    """Issue 61 with real agents: a trusted token's job waits while a write token's agent
    drives the very device (it registers, polls, and is handed nothing); the trusted agent
    then tunes it from scratch, its results answering lookups.
    """
    server, write, store, agents = farm
    trusted = create_token(store, "lab-3", "trusted")
    submission = submit(server, trusted)
    agents.append(Agent(server.url, write, tmp_path / "posing.log"))
    wait_for(lambda: job_of(server, submission))  # the write agent registered the device
    job_id = job_of(server, submission)["id"]
    wait_for(lambda: " drives " in (tmp_path / "posing.log").read_text())
    time.sleep(4)  # more than a lease; the posing agent polls every 0.3 s and gets nothing
    assert job(server.url, job_id)["status"] == "queued"
    assert job(server.url, job_id)["lease_epoch"] == 0
    agents.append(Agent(server.url, trusted, tmp_path / "trusted.log"))
    done = finished(server, job_id)
    assert done["status"] == "completed" and done["lease_epoch"] == 1
    assert "resuming after" not in (tmp_path / "trusted.log").read_text()
    with OctuneClient(server.url) as client:
        answer = client.lookup(done["device_fingerprint"], "gemm",
                               {"m": 16, "n": 16, "k": 16})  # fmt: skip
    assert answer.match == "exact"
