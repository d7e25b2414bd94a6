"""Tokens' lives through `octune token` against a real `octune serve`: listed without their
secret, revoked or rotated or expired and refused on their next request; and the rule that a
cookie carries reads only.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import httpx
import pytest
from helpers.cli_testing import assert_one_line_error, octune
from helpers.server_testing import LiveServer, bearer, make_client

from octune.db.models import ApiToken, utcnow
from octune.server.tokens import create_token


def _token(db_url: str, *args: str) -> str:
    made = octune("token", "create", *args, "--db", db_url)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def test_a_revoked_or_rotated_token_is_refused_on_its_next_request(db_url, tmp_path):
    reader = _token(db_url, "--name", "runtime")
    lab = _token(db_url, "--name", "lab-3", "--scope", "trusted", "--expires", "30d")
    server = LiveServer(db_url, tmp_path / "server.log", "--require-read-token")
    try:
        devices = f"{server.url}/v1/devices"
        assert httpx.get(devices, headers=bearer(reader)).status_code == 200
        assert httpx.get(devices, headers=bearer(lab)).status_code == 200

        listed = json.loads(octune("token", "list", "--json", "--db", db_url).stdout)
        by_name = {row["name"]: row for row in listed}
        assert by_name["runtime"]["state"] == "active"
        assert by_name["runtime"]["last_used_at"] is not None  # used just now
        assert by_name["lab-3"]["expires_at"] is not None
        assert reader not in json.dumps(listed)  # never the secret

        revoked = octune("token", "revoke", "runtime", "--db", db_url)
        assert revoked.returncode == 0, revoked.stderr
        started = time.monotonic()
        refused = httpx.get(devices, headers=bearer(reader))
        assert refused.status_code == 401 and time.monotonic() - started < 1.0
        assert_one_line_error(octune("token", "revoke", "runtime", "--db", db_url),
                              "no active token named 'runtime'")  # fmt: skip

        rotated = octune("token", "rotate", "lab-3", "--db", db_url)
        assert rotated.returncode == 0, rotated.stderr
        new = rotated.stdout.strip()
        assert httpx.get(devices, headers=bearer(lab)).status_code == 401
        assert httpx.get(devices, headers=bearer(new)).status_code == 200
        listed = json.loads(octune("token", "list", "--json", "--db", db_url).stdout)
        active = [row for row in listed if row["name"] == "lab-3" and row["state"] == "active"]
        assert len(active) == 1 and active[0]["scope"] == "trusted"
        assert active[0]["expires_at"] is not None  # the old token's lifetime carried over
    finally:
        server.stop()


def test_an_expired_token_is_refused_and_names_are_one_active_token_each(store):
    token = create_token(store, "short", "read", timedelta(hours=1))
    with make_client(store, require_read_token=True) as client:
        assert client.get("/v1/devices", headers=bearer(token)).status_code == 200
        with store._session() as session:
            row = session.query(ApiToken).filter_by(name="short").one()
            row.expires_at = utcnow() - timedelta(seconds=1)
        assert client.get("/v1/devices", headers=bearer(token)).status_code == 401
    from octune.core.errors import OctuneError

    create_token(store, "ci", "write")
    with pytest.raises(OctuneError, match="a token named 'ci' is active"):
        create_token(store, "ci", "read")
    assert [t.state for t in store.tokens() if t.name == "short"] == ["expired"]
