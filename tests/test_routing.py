"""gateway/_routing.py, sans-I/O: a fake clock and a seeded random source drive the plans by hand."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from llmbridge import hub
from llmbridge.gateway import _routing as routing
from llmbridge.gateway import config as cfg
from llmbridge.gateway._routing import Router


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(deployments, routing_="ordered", retries=None, cooldown=None, seed=1):
    ups = {d["upstream"]: {"format": "openai-chat", "base_url": "http://127.0.0.1:9/v1"} for d in deployments}
    entry = {"name": "m", "routing": routing_, "deployments": deployments}
    if retries is not None:
        entry["retries"] = retries
    if cooldown is not None:
        entry["cooldown"] = cooldown
    config = cfg.parse({"upstreams": ups, "models": [entry]})
    clock = Clock()
    return Router(config, clock=clock, rng=random.Random(seed)), clock


ABC = [{"upstream": "a", "model": "x"}, {"upstream": "b", "model": "x"}, {"upstream": "c", "model": "x"}]
E500 = hub.Error("boom", "api_error", status=500)
E429 = hub.Error("slow down", "rate_limit", status=429)


def serve(router, clock, fail=None, headers=None):
    """One request: attempts until one is answered; ``fail(upstream) -> error or None``. The upstreams tried."""
    plan = router.plan("m")
    tried = []
    while (attempt := plan.next(clock.now)) is not None:
        clock.now += attempt.delay
        attempt.begin(clock.now)
        tried.append(attempt.upstream)
        error = fail(attempt.upstream) if fail else None
        clock.now += 0.01
        if error is None:
            attempt.answered(clock.now)
            attempt.finished(clock.now, 12)
            return tried, plan
        attempt.failed(clock.now, error, headers or {})
    return tried, plan


# --------------------------------------------------------------------------- the rules


def test_the_retry_table():
    def retry(status, type_="api_error"):
        return routing.should_retry(hub.Error("x", type_, status=status))

    assert all(retry(s) for s in (408, 429, 500, 502, 503, 504, 529, 599))
    assert not any(retry(s) for s in (400, 401, 403, 404, 413, 422, 409))
    assert retry(None, "timeout") and retry(None, "overloaded") and not retry(None, "invalid_request")


def test_retry_after_forms():
    assert routing.retry_after({"retry-after": "1"}) == 1.0
    assert routing.retry_after({"retry-after-ms": "250"}) == 0.25
    assert routing.retry_after({"retry-after": "Wed, 02 Dec 2026 12:00:10 GMT"}, wall=1796212800.0) == 10.0
    assert routing.retry_after({"retry-after": "soon"}) is None
    assert routing.retry_after({"retry-after": "99999999"}) == routing.MAX_RETRY_AFTER
    assert routing.retry_after({}) is None


def test_backoff_is_full_jitter_under_an_exponential_cap():
    rng = random.Random(3)
    retries = cfg.Retries(5, 100, 1000)
    for n, cap in ((1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)):
        waits = [routing.backoff(n, retries, rng) for _ in range(300)]
        assert min(waits) >= 0 and max(waits) <= cap
        assert max(waits) > cap * 0.9 and min(waits) < cap * 0.1  # spread over the whole range
    assert routing.backoff(0, retries, rng) == 0


# --------------------------------------------------------------------------- strategies


def test_weighted_follows_the_weights():
    router, clock = make([{"upstream": "a", "weight": 3}, {"upstream": "b", "weight": 1}], "weighted")
    counts = Counter(serve(router, clock)[0][0] for _ in range(4000))
    assert 0.72 < counts["a"] / 4000 < 0.78


def test_least_busy_picks_the_fewest_in_flight():
    router, clock = make(ABC, "least-busy")
    held = []
    for _ in range(6):
        attempt = router.plan("m").next(clock.now)
        attempt.begin(clock.now)
        attempt.answered(clock.now)
        held.append(attempt)
    assert Counter(a.upstream for a in held) == {"a": 2, "b": 2, "c": 2}
    for a in held[:2]:  # whichever two end first, those deployments are picked next
        a.finished(clock.now)
    freed = {a.upstream for a in held[:2]}
    nxt = router.plan("m").next(clock.now)
    assert nxt.upstream in freed


def test_latency_prefers_the_fastest_and_explores_a_little():
    router, clock = make(ABC, "latency")
    speed = {"a": 0.01, "b": 0.05, "c": 0.2}
    counts = Counter()
    for _ in range(2000):
        attempt = router.plan("m").next(clock.now)
        attempt.begin(clock.now)
        clock.now += speed[attempt.upstream]
        attempt.answered(clock.now)
        attempt.finished(clock.now)
        counts[attempt.upstream] += 1
    assert counts["a"] / 2000 > 0.9
    assert counts["b"] > 10 and counts["c"] > 10  # explored, so a change would be seen


def test_ordered_takes_the_first_that_can_serve():
    router, clock = make(ABC)
    assert {serve(router, clock)[0][0] for _ in range(20)} == {"a"}


# --------------------------------------------------------------------------- retries


def test_a_retry_goes_to_another_deployment_after_a_backoff():
    router, clock = make(ABC, retries={"attempts": 3, "backoff_ms": 100, "max_backoff_ms": 1000})
    plan = router.plan("m")
    first = plan.next(clock.now)
    assert first.delay == 0 and first.upstream == "a"
    first.begin(clock.now)
    first.failed(clock.now, E500)
    second = plan.next(clock.now)
    assert second.upstream != "a" and 0 <= second.delay <= 0.1


def test_errors_that_must_not_retry_are_not_retried():
    router, clock = make(ABC, retries={"attempts": 3})
    for status in (400, 401, 403, 404, 422):
        tried, plan = serve(router, clock, lambda up, s=status: hub.Error("no", "invalid_request", status=s))
        assert len(tried) == 1 and plan.error.status == status
    assert all(s.failures == 0 for s in router.states.values())  # not the deployment's fault


def test_never_sooner_than_retry_after():
    router, clock = make(ABC[:2], retries={"attempts": 3, "backoff_ms": 10})
    plan = router.plan("m")
    a = plan.next(clock.now)
    a.begin(clock.now)
    a.failed(clock.now, E429, {"retry-after": "1"})
    b = plan.next(clock.now)
    assert b.upstream == "b"  # another deployment is ready: no waiting on a
    b.begin(clock.now)
    b.failed(clock.now, E429, {"retry-after": "2"})
    again = plan.next(clock.now)  # both wait: the soonest, not before its retry-after
    assert again.upstream == "a" and again.delay >= 1.0 - 1e-9
    # a fresh request meanwhile does not go to a either until its retry-after passed
    clock.now += 0.5
    assert router.plan("m").next(clock.now).delay >= 0.5 - 1e-9


def test_no_retry_past_the_deadline():
    router, clock = make(ABC[:1], retries={"attempts": 3})
    plan = router.plan("m", deadline=clock.now + 0.5)
    a = plan.next(clock.now)
    a.begin(clock.now)
    a.failed(clock.now, E429, {"retry-after": "5"})
    assert plan.next(clock.now) is None and plan.error is E429 and plan.headers == {"retry-after": "5"}


def test_attempts_bound_the_tries():
    router, clock = make(ABC, retries={"attempts": 2, "backoff_ms": 0})
    tried, plan = serve(router, clock, lambda up: E500)
    assert len(tried) == 2 and plan.error is E500


# --------------------------------------------------------------------------- cooldowns


def test_cooldown_then_exactly_one_probe_then_back():
    b_down = lambda up: E500 if up == "b" else None  # noqa: E731
    sent_to_b = 0
    # a healthy, b down, weighted so that b would be picked nearly always
    router, clock = make(
        [{"upstream": "a", "weight": 1}, {"upstream": "b", "weight": 100}], "weighted",
        retries={"attempts": 2, "backoff_ms": 0}, cooldown={"failures": 2, "seconds": 5},
    )  # fmt: skip
    for _ in range(50):
        tried, plan = serve(router, clock, b_down)
        sent_to_b += tried.count("b")
        assert plan.error is None  # every request served (by a)
        clock.now += 0.01
    b = router.states["b/m"]
    assert sent_to_b == 2 and b.state == routing.COOLING  # failures=2: two requests, then out
    clock.now = b.cooling_until + 0.001
    plan = router.plan("m")
    probe = plan.next(clock.now)
    assert probe.upstream == "b" and probe.probe
    probe.begin(clock.now)
    assert b.state == routing.PROBING
    others = [router.plan("m").next(clock.now).upstream for _ in range(20)]
    assert "b" not in others  # exactly one probe in flight
    probe.answered(clock.now + 0.01)
    assert b.state == routing.OK and b.failures == 0
    counts = Counter(serve(router, clock)[0][0] for _ in range(50))
    assert counts["b"] > 40  # back in rotation


def test_a_failed_probe_cools_again():
    router, clock = make(ABC[:2], retries={"attempts": 2, "backoff_ms": 0}, cooldown={"failures": 1, "seconds": 5})
    serve(router, clock, lambda up: E500 if up == "a" else None)
    a = router.states["a/x"]
    assert a.state == routing.COOLING
    clock.now = a.cooling_until
    tried, _ = serve(router, clock, lambda up: E500 if up == "a" else None)
    assert tried == ["a", "b"] and a.state == routing.COOLING
    assert a.cooling_until == pytest.approx(clock.now + 5, abs=0.1)


def test_a_suspect_deployment_gets_no_more_waiting_requests_than_failures_left():
    router, clock = make([*ABC[:1], {"upstream": "b", "model": "x", "weight": 1e6}], "weighted",
                         cooldown={"failures": 3, "seconds": 30})  # fmt: skip
    first = router.plan("m").next(clock.now)
    assert first.upstream == "b"
    first.begin(clock.now)
    first.failed(clock.now, E500)
    pending = []
    for _ in range(10):
        attempt = router.plan("m").next(clock.now)
        attempt.begin(clock.now)
        pending.append(attempt.upstream)
    assert pending.count("b") == 2  # 1 failure + 2 waiting = 3 = failures before it cools


def test_when_every_deployment_is_cooling_they_are_tried_anyway():
    """Panic, as Envoy's: refusing everyone would turn an overload into an outage."""
    router, clock = make(ABC[:2], retries={"attempts": 1}, cooldown={"failures": 1, "seconds": 7})
    serve(router, clock, lambda up: E500 if up == "a" else None)
    clock.now += 1
    serve(router, clock, lambda up: E500)  # b fails too: both cooling, a back sooner
    assert {s.state for s in router.states.values()} == {routing.COOLING}
    attempt = router.plan("m").next(clock.now)
    assert attempt.upstream == "a" and attempt.panic and not attempt.probe
    attempt.begin(clock.now)
    attempt.answered(clock.now + 0.01)
    assert router.states["a/x"].state == routing.OK  # it answered: back
    assert router.plan("m").next(clock.now).upstream == "a"


def test_a_single_deployment_is_never_refused_for_its_health():
    router, clock = make(ABC[:1], retries={"attempts": 1}, cooldown={"failures": 1, "seconds": 7})
    serve(router, clock, lambda up: E500)
    assert router.states["a/x"].state == routing.COOLING
    tried, plan = serve(router, clock)
    assert tried == ["a"] and plan.error is None


# --------------------------------------------------------------------------- fallbacks and limits


def test_fallback_only_when_the_others_cannot_serve():
    deployments = [*ABC[:2], {"upstream": "f", "model": "x", "fallback": True}]
    router, clock = make(deployments, "weighted", retries={"attempts": 2, "backoff_ms": 0})
    assert "f" not in {serve(router, clock)[0][0] for _ in range(200)}
    tried, plan = serve(router, clock, lambda up: None if up == "f" else E500)
    assert tried[-1] == "f" and plan.error is None and len(tried) == 3  # a, b (attempts=2), then f


def test_rpm_skips_a_deployment_at_its_limit():
    router, clock = make([{"upstream": "a", "model": "x", "rpm": 3}, {"upstream": "b", "model": "x"}])
    tried = [serve(router, clock)[0][0] for _ in range(5)]
    assert tried == ["a", "a", "a", "b", "b"]
    clock.now += 60.01
    assert serve(router, clock)[0][0] == "a"


def test_every_deployment_at_its_limit_is_a_429():
    router, clock = make([{"upstream": "a", "model": "x", "rpm": 1}])
    serve(router, clock)
    plan = router.plan("m")
    assert plan.next(clock.now) is None and plan.error.status == 429 and int(plan.headers["retry-after"]) >= 59


def test_snapshot_shows_each_deployment():
    router, clock = make(ABC, cooldown={"failures": 1, "seconds": 9})
    serve(router, clock, lambda up: E500 if up == "a" else None)
    rows = {r["deployment"]: r for r in router.snapshot()}
    assert rows["a/x"]["state"] == "cooling" and rows["a/x"]["cooling_for_s"] > 8
    assert rows["b/x"]["state"] == "ok" and rows["b/x"]["latency_ewma_ms"] == pytest.approx(10, abs=1)
    assert rows["c/x"]["latency_ewma_ms"] is None and rows["a/x"]["in_flight"] == 0


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"routing": "fastest", "upstream": "a"}, "models[0].routing"),
        ({"deployments": [{"upstream": "zz"}]}, "models[0].deployments[0].upstream"),
        ({"deployments": [{"upstream": "a", "weight": 0}]}, "models[0].deployments[0].weight"),
        ({"deployments": [{"upstream": "a", "rpm": 1.5}]}, "models[0].deployments[0].rpm"),
        ({"deployments": [{"upstream": "a", "tpm": -1}]}, "models[0].deployments[0].tpm"),
        ({"deployments": [{"upstream": "a", "fallback": "yes"}]}, "models[0].deployments[0].fallback"),
        ({"deployments": [{"upstream": "a", "colour": 1}]}, "models[0].deployments[0].colour"),
        ({"deployments": [{"upstream": "a", "fallback": True}]}, "models[0].deployments"),
        ({"deployments": []}, "models[0].deployments"),
        ({"deployments": [{"upstream": "a"}], "upstream": "a"}, "models[0].upstream"),
        ({"upstream": "a", "retries": {"attempts": 0}}, "models[0].retries.attempts"),
        ({"upstream": "a", "retries": {"backoff_ms": -1}}, "models[0].retries.backoff_ms"),
        ({"upstream": "a", "retries": {"backoff_ms": 500, "max_backoff_ms": 100}}, "models[0].retries.max_backoff_ms"),
        ({"upstream": "a", "retries": {"tries": 2}}, "models[0].retries.tries"),
        ({"upstream": "a", "cooldown": {"failures": -1}}, "models[0].cooldown.failures"),
        ({"upstream": "a", "cooldown": {"seconds": 0}}, "models[0].cooldown.seconds"),
    ],
)
def test_config_errors_name_the_key(entry, key):
    raw = {"upstreams": {"a": {"format": "openai-chat", "base_url": "http://x/v1"}}, "models": [{"name": "m", **entry}]}
    with pytest.raises(cfg.ConfigError) as info:
        cfg.parse(raw)
    assert info.value.key == key


def test_config_forms():
    ups = {n: {"format": "openai-chat", "base_url": "http://x/v1"} for n in ("a", "b")}
    old = cfg.parse({"upstreams": ups, "models": [{"name": "m", "upstreams": ["a", "b"]}]}).models["m"]
    assert old.routing == "ordered" and [d.upstream for d in old.deployments] == ["a", "b"]
    assert old.retries.attempts == 2 and old.cooldown.failures == 0  # today's behaviour: each once, no cooldown
    new = cfg.parse({"upstreams": ups, "models": [{
        "name": "m", "routing": "least-busy", "retries": {"attempts": 3, "backoff_ms": 100, "max_backoff_ms": 4000},
        "deployments": [{"upstream": "a", "model": "x", "weight": 3, "rpm": 600, "tpm": 200000},
                        {"upstream": "b", "fallback": True}],
    }]}).models["m"]  # fmt: skip
    assert new.routes == (cfg.Route("a", "x"), cfg.Route("b", "m"))
    assert new.deployments[0] == cfg.Deployment("a", "x", 3.0, 600, 200000, False)
    assert new.deployments[1].fallback and new.cooldown == cfg.Cooldown(3, 30.0)
    assert new.retries == cfg.Retries(3, 100.0, 4000.0)
    partial = cfg.parse({"upstreams": ups, "models": [
        {"name": "m", "upstreams": ["a", "b"], "retries": {"backoff_ms": 50}}]}).models["m"]  # fmt: skip
    assert partial.retries == cfg.Retries(2, 50.0, 4000.0)  # attempts: one per deployment
