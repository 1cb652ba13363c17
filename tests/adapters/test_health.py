"""The health endpoint: a real HTTP server on 127.0.0.1 serving a snapshot callable."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tpelastic.adapters.health import HealthServer, maybe_start


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], json.loads(err.read())


def test_serves_the_current_snapshot_as_json():
    state = {"state": "HEALTHY", "round": 2, "last_progress_age_s": {"0": 1.5}}
    with HealthServer(lambda: dict(state)) as server:
        assert get(server.url) == (200, "application/json", state)
        state["round"] = 3  # each request calls the snapshot anew
        assert get(f"http://127.0.0.1:{server.port}/")[2]["round"] == 3


def test_unknown_path_and_a_failing_snapshot_are_json_errors():
    def broken():
        raise RuntimeError("agent not ready")

    with HealthServer(broken) as server:
        code, _, body = get(server.url)
        assert (code, body) == (500, {"error": "snapshot failed: RuntimeError: agent not ready"})
        code, _, body = get(f"http://127.0.0.1:{server.port}/nope")
        assert code == 404 and "try /health" in body["error"]


def test_off_by_default_and_close_frees_the_port():
    assert maybe_start(dict, port=None) is None
    server = maybe_start(lambda: {"ok": True}, port=0)
    assert server is not None
    url = server.url
    assert get(url)[2] == {"ok": True}
    server.close()
    server.close()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)
