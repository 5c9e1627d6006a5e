"""Routing across deployments through the real gateway, against fault-injecting upstreams on
real sockets (tests/fault_upstream.py): A healthy, B failing in turn (429 with retry-after: 1,
500, connection refused, a stall before the first byte), C slow.  Properties, not timings."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from llmbridge.gateway import config, create_app
from tests.fault_upstream import FaultUpstream
from tests.gateway_util import serving, wait_for
from tests.teams_util import free_port, redis_server

FIRST_BYTE = 0.5  # seconds: B's stall costs this much
HTTP = httpx.Client(timeout=20)
FAULTS = ("429", "500", "refuse", "stall")


def b_in_turn(n: int) -> str:
    """Every other request fails, the faults in turn."""
    return FAULTS[(n // 2) % 4] if n % 2 else "ok"


@contextmanager
def upstreams(**modes) -> Iterator[dict[str, FaultUpstream]]:
    with ExitStack() as stack:
        ups = {}
        for name, mode in modes.items():
            up = FaultUpstream(name, mode).start()
            stack.callback(up.stop)
            ups[name] = up
        yield ups


def raw(ups, deployments, *, gateway=None, **model) -> dict:
    return {
        "gateway": dict(gateway or {}),
        "upstreams": {
            name: {"format": "openai-chat", "base_url": up.url, "timeouts": {"connect": 1, "first_byte": FIRST_BYTE}}
            for name, up in ups.items()
        },
        "models": [{"name": "m", "deployments": deployments, **model}],
    }


@contextmanager
def gateway(raw_config: dict, seed: int = 7):
    app = create_app(config.parse(raw_config))
    app.state.gateway.pipeline.router.rng = random.Random(seed)
    with serving(app) as server:
        yield server


def ask(url: str, stream: bool = True) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return HTTP.post(url + "/v1/chat/completions", json=body)


def served(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    assert "hello from" in response.text and '"error"' not in response.text
    return response.headers["x-llmbridge-deployment"]


def deployments(url: str) -> dict[str, dict]:
    return {row["deployment"]: row for row in HTTP.get(url + "/admin/deployments").json()["data"]}


def test_faults_in_turn_never_reach_the_client_and_retry_after_holds():
    with upstreams(a="ok", b=b_in_turn, c="slow") as ups:
        deps = [{"upstream": "a", "model": "x"}, {"upstream": "b", "model": "x", "weight": 8},
                {"upstream": "c", "model": "x"}]  # fmt: skip
        conf = raw(
            ups,
            deps,
            routing="weighted",
            retries={"attempts": 3, "backoff_ms": 20, "max_backoff_ms": 200},
            cooldown={"failures": 10, "seconds": 30},
        )  # (a refused listener refuses every try for a while)
        with gateway(conf) as gw:
            names = Counter(served(ask(gw.url, stream=n % 3 != 0)) for n in range(28))
            # every fault happened, and none reached the client
            b = ups["b"]
            assert all(b.arrivals_of(fault) for fault in FAULTS), b.arrivals
            assert set(names) <= {"a/x", "b/x", "c/x"} and names["b/x"] > 0
            # no request reached b sooner than the retry-after of its 429 (requests are one at a time)
            times = [t for t, _ in b.arrivals]
            for t in b.arrivals_of("429"):
                later = [u for u in times if u > t]
                assert not later or later[0] >= t + 1.0
            rows = deployments(gw.url)
            assert rows["b/x"]["errors"] >= 4 and rows["a/x"]["in_flight"] == 0
            assert {"state", "latency_ewma_ms", "in_flight"} <= set(rows["c/x"])
            metrics = HTTP.get(gw.url + "/metrics").text
            assert 'llmbridge_deployment_in_flight{model="x",upstream="b"}' in metrics
            assert 'llmbridge_deployment_state{model="x",state="ok",upstream="a"} 1.0' in metrics
            assert "llmbridge_deployment_latency_ewma_seconds" in metrics
            traffic = HTTP.get(gw.url + "/ui/api/traffic").json()
            assert {r["deployment"] for r in traffic["deployments"]} == {"a/x", "b/x", "c/x"}
            assert {e["deployment"] for e in traffic["entries"]} <= {"a/x", "b/x", "c/x"}


@pytest.mark.parametrize("down", ["500", "refuse"])
def test_a_deployment_down_cools_after_failures_and_is_probed_back(down):
    seconds = 1.0
    with upstreams(a="ok", b="ok") as ups:
        deps = [{"upstream": "a", "model": "x"}, {"upstream": "b", "model": "x", "weight": 50}]
        conf = raw(ups, deps, routing="weighted", cooldown={"failures": 2, "seconds": seconds},
                   retries={"attempts": 2, "backoff_ms": 0})  # fmt: skip
        with gateway(conf) as gw:
            for _ in range(3):
                served(ask(gw.url))
            b = ups["b"]
            before = deployments(gw.url)["b/x"]["requests"]
            if down == "refuse":
                b.down()
            else:
                b.mode = "500"
            went_down = time.monotonic()
            for _ in range(10):  # every request still served (by a)
                assert served(ask(gw.url)) == "a/x"
            row = deployments(gw.url)["b/x"]
            assert row["state"] == "cooling"
            assert row["requests"] - before == 2  # failures = 2: two requests reached it, then none
            if down == "500":
                assert len([t for t in b.arrivals_of("500") if t >= went_down]) == 2
            if down == "refuse":
                b.up()
            else:
                b.mode = "ok"
            back_up = time.monotonic()
            deadline = back_up + seconds + 1.0
            while time.monotonic() < deadline and deployments(gw.url)["b/x"]["state"] != "ok":
                served(ask(gw.url))
                time.sleep(0.05)
            assert deployments(gw.url)["b/x"]["state"] == "ok"  # probed and back within seconds + 1 s
            assert next(t for t in b.arrivals_of("ok") if t > back_up) <= deadline
            assert Counter(served(ask(gw.url)) for _ in range(10))["b/x"] >= 7  # back in rotation


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_errors_that_must_not_retry_are_not_retried(status):
    with upstreams(a="ok", b=str(status)) as ups:
        deps = [{"upstream": "b", "model": "x"}, {"upstream": "a", "model": "x"}]
        with gateway(raw(ups, deps, retries={"attempts": 3})) as gw:
            response = ask(gw.url)
            assert response.status_code == status
            assert response.headers["x-llmbridge-deployment"] == "b/x"
            assert response.headers["x-llmbridge-attempts"] == "1"
            assert ups["b"].count == 1 and ups["a"].count == 0


def test_latency_prefers_the_fast_deployment():
    with upstreams(a="ok", c="slow") as ups:
        deps = [{"upstream": "c", "model": "x"}, {"upstream": "a", "model": "x"}]
        with gateway(raw(ups, deps, routing="latency")) as gw:
            names = Counter(served(ask(gw.url)) for _ in range(40))
            assert names["a/x"] >= 32
            rows = deployments(gw.url)
            assert rows["c/x"]["latency_ewma_ms"] > rows["a/x"]["latency_ewma_ms"]


def test_the_legacy_upstreams_form_still_falls_back_in_order():
    with upstreams(a="500", b="ok") as ups:
        conf = raw(ups, [])
        conf["models"] = [{"name": "m", "upstreams": ["a", "b"], "upstream_model": "x"}]
        with gateway(conf) as gw:
            response = ask(gw.url, stream=False)
            assert served(response) == "b/x" and response.headers["x-llmbridge-attempts"] == "2"
            assert ups["a"].count == 1


def test_replicas_sharing_redis_hold_a_deployments_rpm_exactly(tmp_path):
    with redis_server(tmp_path) as url, upstreams(a="ok", b="ok") as ups:
        deps = [{"upstream": "a", "model": "x", "rpm": 5}, {"upstream": "b", "model": "x", "fallback": True}]
        conf = raw(ups, deps, gateway={"redis_url": url})
        with gateway(conf, seed=1) as one, gateway(conf, seed=2) as two:
            names = Counter(served(ask(gw.url)) for _ in range(6) for gw in (one, two))
            assert ups["a"].count == 5 and names == {"a/x": 5, "b/x": 7}


def test_replicas_sharing_redis_share_a_cooldown(tmp_path):
    with redis_server(tmp_path) as url, upstreams(a="ok", b="500") as ups:
        deps = [{"upstream": "b", "model": "x"}, {"upstream": "a", "model": "x"}]  # ordered: b first
        conf = raw(ups, deps, gateway={"redis_url": url}, cooldown={"failures": 2, "seconds": 30})
        with gateway(conf) as one, gateway(conf) as two:
            for _ in range(2):
                assert served(ask(one.url)) == "a/x"
            assert wait_for(lambda: deployments(one.url)["b/x"]["state"] == "cooling")
            assert ups["b"].count == 2
            for _ in range(5):  # the other replica never saw b fail, yet sends it nothing
                assert served(ask(two.url)) == "a/x"
            assert ups["b"].count == 2


def test_the_admin_cli_shows_the_deployments(capsys):
    from llmbridge import cli

    with upstreams(a="ok", b="500") as ups:
        deps = [{"upstream": "b", "model": "x"}, {"upstream": "a", "model": "x"}]
        conf = raw(ups, deps, cooldown={"failures": 1, "seconds": 30}, gateway={"api_keys": ["gw-key"]})
        with gateway(conf) as gw:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            HTTP.post(gw.url + "/v1/chat/completions", json=body, headers={"authorization": "Bearer gw-key"})
            assert HTTP.get(gw.url + "/admin/deployments").status_code == 401  # a key when the gateway has keys
            assert cli.main(["deployments", "--url", gw.url, "--key", "gw-key"]) == 0
            lines = capsys.readouterr().out.splitlines()
            assert lines[0].split()[:3] == ["model_name", "deployment", "state"]
            rows = {line.split()[1]: line.split() for line in lines[1:]}
            assert rows["b/x"][2] == "cooling" and rows["a/x"][2] == "ok"
            assert cli.main(["deployments", "--url", gw.url, "--key", "wrong"]) == 3
            assert "HTTP 401" in capsys.readouterr().err


def test_redis_down_routing_goes_on_with_its_own_state(caplog):
    with upstreams(a="ok", b="ok") as ups:
        deps = [{"upstream": "a", "model": "x", "rpm": 2}, {"upstream": "b", "model": "x"}]
        conf = raw(ups, deps, gateway={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
        with gateway(conf) as gw:
            assert [served(ask(gw.url)) for _ in range(4)] == ["a/x", "a/x", "b/x", "b/x"]  # rpm held locally
    assert any("routing state in Redis unavailable" in r.getMessage() for r in caplog.records)


def test_replicas_sharing_redis_send_one_probe_between_them(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    with redis_server(tmp_path) as url, upstreams(a="ok", b="500") as ups:
        deps = [{"upstream": "b", "model": "x"}, {"upstream": "a", "model": "x"}]  # ordered: b first
        conf = raw(ups, deps, gateway={"redis_url": url}, cooldown={"failures": 1, "seconds": 1})
        with gateway(conf) as one, gateway(conf) as two:
            assert served(ask(one.url)) == "a/x" and ups["b"].count == 1  # b failed once: cooling
            ups["b"].mode = "stall"  # the probe will hang until first_byte, then fail
            time.sleep(1.1)  # the cooldown is over: the next request, on either replica, probes
            with ThreadPoolExecutor(8) as pool:
                names = list(pool.map(lambda n: served(ask((one, two)[n % 2].url)), range(8)))
            assert names == ["a/x"] * 8
            assert ups["b"].count == 2  # exactly one probe between the two replicas
