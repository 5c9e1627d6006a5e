"""Gateway configuration: a TOML file (stdlib ``tomllib``), secrets from the environment.

Every problem is reported at start as a :class:`ConfigError` that names the key, e.g.
``models[1].upstream: unknown upstream 'opneai' (known: openai, local)``.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import dialects
from . import _cache
from . import _responses_store as _store
from ._teams import pricing as _pricing
from ._teams import settings as _teams

__all__ = [
    "Config",
    "ConfigError",
    "Cooldown",
    "Deployment",
    "FORMATS",
    "GatewayConfig",
    "LOCAL",
    "ModelConfig",
    "ROUTING",
    "Retries",
    "Route",
    "Timeouts",
    "UpstreamConfig",
    "default_config",
    "load",
    "loads",
    "parse",
]

MIN_UI_KEY = 16  # characters: the console key guards traffic and the playground
LOCAL = "local"  # the format of the in-process local model upstream
LOCAL_EMBED = "local-embed"  # the in-process embedding model, served by any "local" upstream
MODEL_KINDS = ("chat", "embedding")
ROUTING = ("ordered", "weighted", "least-busy", "latency")  # how a model picks among its deployments
FORMATS = (*dialects.NAMES, LOCAL)
MAX_SPARE_CONNECTIONS = 64  # spare_connections per upstream: a few cover a burst's first requests
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(ValueError):
    """A config problem; ``key`` is the dotted path of the offending key."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


@dataclass(frozen=True)
class Timeouts:
    """Seconds; ``None`` means no limit."""

    connect: float | None = 10.0
    first_byte: float | None = 120.0  # request sent -> first body bytes
    idle: float | None = 120.0  # between two chunks of the body
    total: float | None = 900.0  # the whole exchange


@dataclass(frozen=True)
class UpstreamConfig:
    name: str
    format: str  # a dialect name or "local"
    base_url: str | None = None
    api_key: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    headers: dict[str, str] = field(default_factory=dict)  # extra headers sent upstream
    # Send hub data the upstream's dialect has no field for under the "llmbridge" key. Only
    # for upstreams that accept it (another llmbridge gateway, the replay server): vendor APIs
    # reject unknown fields, so by default those keys are left out (and logged).
    extensions: bool = False
    # Connections kept open ahead of the requests (opened at start-up, and again when a request
    # takes the last idle one): a request then skips the TCP and TLS handshakes (_http.HTTPClient).
    spare_connections: int = 1


@dataclass(frozen=True)
class Route:
    upstream: str
    upstream_model: str


@dataclass(frozen=True)
class Deployment:
    """One place a model runs: an upstream and the model name it knows (gateway/_routing.py)."""

    upstream: str
    model: str
    weight: float = 1.0  # routing = "weighted": share of the requests
    rpm: int | None = None  # requests per minute sent to it (a sliding 60 s window); at the limit it is skipped
    tpm: int | None = None  # tokens per UTC minute (estimated up front, corrected at the end)
    fallback: bool = False  # only when the other deployments cannot serve


@dataclass(frozen=True)
class Retries:
    """Tries before the client's first byte: ``attempts`` in all (1: no retry), with
    exponential backoff and full jitter (``backoff_ms`` * 2^(n-1), capped at ``max_backoff_ms``)."""

    attempts: int = 1
    backoff_ms: float = 100.0
    max_backoff_ms: float = 4000.0


@dataclass(frozen=True)
class Cooldown:
    """A deployment that failed ``failures`` times in a row is out for ``seconds``, then gets
    one probe request; ``failures = 0`` turns cooldowns off."""

    failures: int = 3
    seconds: float = 30.0


NO_COOLDOWN = Cooldown(0, 30.0)


@dataclass(frozen=True)
class ModelConfig:
    name: str  # what clients ask for
    routes: tuple[Route, ...]  # the deployments' (upstream, model), in config order
    price: _pricing.Price | None = None  # USD per million tokens, for the ledger's cost
    kind: str = "chat"  # "chat" | "embedding": an embedding model answers MMSP's stream with vectors
    routing: str = "ordered"  # one of ROUTING
    deployments: tuple[Deployment, ...] = ()  # () : one plain deployment per route
    retries: Retries | None = None  # None: one attempt per (non-fallback) deployment, 100 ms backoff
    cooldown: Cooldown = NO_COOLDOWN  # off unless configured (the deployments form defaults to 3 / 30 s)
    cache: _cache.CachePolicy | None = None  # the model's response cache (gateway/_cache.py); None: off

    def __post_init__(self) -> None:
        if not self.deployments:  # built in code from routes alone: plain deployments
            plain = tuple(Deployment(r.upstream, r.upstream_model) for r in self.routes)
            object.__setattr__(self, "deployments", plain)
        regular = max(1, sum(not d.fallback for d in self.deployments))
        if self.retries is None:
            object.__setattr__(self, "retries", Retries(attempts=regular))
        elif self.retries.attempts == 0:  # a retries table without attempts: one per deployment
            object.__setattr__(self, "retries", Retries(regular, self.retries.backoff_ms, self.retries.max_backoff_ms))


@dataclass(frozen=True)
class GatewayConfig:
    keepalive_seconds: float = 15.0
    max_body_bytes: int = 10 * 1024 * 1024
    api_keys: tuple[str, ...] = ()
    record_dir: str | None = None
    # One upstream event (the bytes between two blank lines) larger than this ends the answer
    # with an error: big enough for base64 images, small enough to bound a stream's memory.
    max_event_bytes: int = 32 * 1024 * 1024
    max_json_depth: int = 128  # request bodies nested deeper get 400 (see gateway/_checks.py)
    # Our "llmbridge" extension data in vendor-dialect answers: off unless asked (the
    # x-llmbridge-extensions request header, or this), so users' tools never see it.
    extensions: bool = False
    # Client connections (see gateway/_server.py): seconds to send a whole request head,
    # seconds an idle keep-alive connection stays open, open connections before 503.
    header_timeout: float = 10.0
    idle_timeout: float = 30.0
    max_connections: int = 1000
    # The web console at /ui (docs/ui.md): on unless turned off; with api_keys it needs ui_key.
    ui: bool = True
    ui_key: str | None = None
    ui_traffic: int = 200  # recent requests kept in memory for the console's Traffic page
    teams: _teams.TeamsSettings = field(default_factory=_teams.TeamsSettings)  # keys, ledger, metrics
    max_image_bytes: int = 20 * 1024 * 1024  # decoded size of one base64 image in a request (OpenAI's limit)
    # /v1/messages without max_tokens: 0 refuses it as Anthropic does (400 "max_tokens: Field
    # required"); a positive number is sent instead (docs/gateway.md).
    anthropic_default_max_tokens: int = 0
    ui_session_hours: float = 12.0  # a console login lasts this long (sessions: gateway/_ui/_sessions.py)
    # Failed key or console-login attempts per client address and minute before 429 (0: no limit).
    auth_failures_per_minute: int = 10
    # Browser origins (besides the gateway's own) that may open the WebSocket of a keyless gateway.
    allowed_origins: tuple[str, ...] = ()
    store: _store.StoreSettings = field(default_factory=_store.StoreSettings)  # stored responses, cache backend


@dataclass(frozen=True)
class Config:
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    upstreams: dict[str, UpstreamConfig] = field(default_factory=dict)
    models: dict[str, ModelConfig] = field(default_factory=dict)


def default_config() -> Config:
    """No config file: the embedded local models, ``local`` (chat) and ``local-embed`` (embeddings)."""
    return Config(
        upstreams={LOCAL: UpstreamConfig(LOCAL, LOCAL)},
        models={
            LOCAL: ModelConfig(LOCAL, (Route(LOCAL, LOCAL),)),
            LOCAL_EMBED: ModelConfig(LOCAL_EMBED, (Route(LOCAL, LOCAL_EMBED),), kind="embedding"),
        },
    )


def load(path: str | os.PathLike[str]) -> Config:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read config file ({exc.strerror})") from None
    return loads(text)


def loads(text: str, env: Mapping[str, str] | None = None) -> Config:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("<toml>", str(exc)) from None
    return parse(raw, os.environ if env is None else env)


def parse(raw: dict[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """A parsed TOML document to a validated :class:`Config`; ``env`` (default ``os.environ``) for ``${VAR}``."""
    env = os.environ if env is None else env
    _known(raw, "", {"gateway", "upstreams", "models"})
    gateway = _gateway(_table(raw, "gateway", ""), env)
    upstreams = {}
    for name, value in _table(raw, "upstreams", "").items():
        upstreams[name] = _upstream(name, _as_table(value, f"upstreams.{name}"), env)
    models: dict[str, ModelConfig] = {}
    entries = raw.get("models", [])
    if not isinstance(entries, list):
        raise ConfigError("models", "must be an array of tables ([[models]])")
    for i, entry in enumerate(entries):
        model = _model(_as_table(entry, f"models[{i}]"), f"models[{i}]", upstreams)
        if model.name in models:
            raise ConfigError(f"models[{i}].name", f"model {model.name!r} is defined twice")
        models[model.name] = model
    for i, model in enumerate(models.values()):
        embed = model.cache.embed_model if model.cache is not None else None
        if embed is not None and (embed not in models or models[embed].kind != "embedding"):
            known = ", ".join(n for n, m in models.items() if m.kind == "embedding") or "none defined"
            raise ConfigError(
                f"models[{i}].cache.embed_model", f'{embed!r} is not a model of kind "embedding" (known: {known})'
            )
    return Config(gateway, upstreams, models)


# --------------------------------------------------------------------------- sections


def _gateway(t: dict[str, Any], env: Mapping[str, str]) -> GatewayConfig:
    _known(
        t,
        "gateway",
        {
            "keepalive_seconds",
            "max_body_bytes",
            "api_keys",
            "record_dir",
            "max_json_depth",
            "extensions",
            "header_timeout",
            "idle_timeout",
            "max_connections",
            "max_event_bytes",
            "ui",
            "ui_key",
            "ui_traffic",
            "max_image_bytes",
            "anthropic_default_max_tokens",
            "ui_session_hours",
            "auth_failures_per_minute",
            "allowed_origins",
            *_teams.KEYS,
            *_store.KEYS,
        },
    )
    keepalive = _number(t, "keepalive_seconds", "gateway", 15.0)
    if keepalive is None or keepalive <= 0:
        raise ConfigError("gateway.keepalive_seconds", "must be a positive number")
    max_body = _positive_int(t, "max_body_bytes", 10 * 1024 * 1024)
    keys = t.get("api_keys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ConfigError("gateway.api_keys", "must be an array of strings")
    keys = tuple(k for i, key in enumerate(keys) if (k := _expand(key, f"gateway.api_keys[{i}]", env)))
    record_dir = t.get("record_dir")
    if record_dir is not None and not isinstance(record_dir, str):
        raise ConfigError("gateway.record_dir", "must be a string (a directory path)")
    max_json_depth = _positive_int(t, "max_json_depth", 128)
    max_connections = _positive_int(t, "max_connections", 1000)
    max_event_bytes = _positive_int(t, "max_event_bytes", 32 * 1024 * 1024)
    max_image_bytes = _positive_int(t, "max_image_bytes", 20 * 1024 * 1024)
    default_max_tokens = t.get("anthropic_default_max_tokens", 0)
    if type(default_max_tokens) is not int or default_max_tokens < 0:
        raise ConfigError("gateway.anthropic_default_max_tokens", "must be a non-negative integer (0: refuse)")
    header_timeout = _seconds(t, "header_timeout", 10.0)
    idle_timeout = _seconds(t, "idle_timeout", 30.0)
    extensions = t.get("extensions", False)
    if not isinstance(extensions, bool):
        raise ConfigError("gateway.extensions", "must be true or false")
    ui = t.get("ui", True)
    if not isinstance(ui, bool):
        raise ConfigError("gateway.ui", "must be true or false")
    ui_key = t.get("ui_key")
    if ui_key is not None and not isinstance(ui_key, str):
        raise ConfigError("gateway.ui_key", "must be a string")
    ui_key = _expand(ui_key, "gateway.ui_key", env) if ui_key else None
    if ui_key and len(ui_key) < MIN_UI_KEY:
        raise ConfigError("gateway.ui_key", f"must be at least {MIN_UI_KEY} characters (it opens the console)")
    if ui_key and ui_key in keys:
        raise ConfigError("gateway.ui_key", "must differ from every api_keys entry (a client key opens no console)")
    session_hours = t.get("ui_session_hours", 12.0)
    if isinstance(session_hours, bool) or not isinstance(session_hours, int | float) or not 0 < session_hours <= 720:
        raise ConfigError("gateway.ui_session_hours", "must be a number of hours in (0, 720]")
    failures = t.get("auth_failures_per_minute", 10)
    if type(failures) is not int or not 0 <= failures <= 1_000_000:
        raise ConfigError("gateway.auth_failures_per_minute", "must be an integer from 0 (no limit) to 1000000")
    origins = _origins(t.get("allowed_origins", []))
    ui_traffic = t.get("ui_traffic", 200)
    if type(ui_traffic) is not int or not 0 <= ui_traffic <= 100_000:
        raise ConfigError("gateway.ui_traffic", "must be an integer from 0 to 100000")
    try:
        teams = _teams.parse(t, lambda value, key: _expand(value, key, env))
        store = _store.parse(t)
    except ValueError as exc:
        raise ConfigError(*exc.args) from None
    if ui_key and ui_key == teams.master_key:
        raise ConfigError("gateway.ui_key", "must differ from master_key")
    return GatewayConfig(
        keepalive,
        max_body,
        keys,
        record_dir or None,
        extensions=extensions,
        ui=ui,
        ui_key=ui_key or None,
        ui_traffic=ui_traffic,
        teams=teams,
        max_json_depth=max_json_depth,
        max_connections=max_connections,
        max_event_bytes=max_event_bytes,
        max_image_bytes=max_image_bytes,
        header_timeout=header_timeout,
        idle_timeout=idle_timeout,
        anthropic_default_max_tokens=default_max_tokens,
        ui_session_hours=float(session_hours),
        auth_failures_per_minute=failures,
        allowed_origins=origins,
        store=store,
    )


def _origins(value: Any) -> tuple[str, ...]:
    """``gateway.allowed_origins``: browser origins like ``https://app.example.com`` (scheme://host[:port])."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("gateway.allowed_origins", 'must be an array of origins like "https://app.example.com"')
    out = []
    for i, origin in enumerate(value):
        o = origin.strip().rstrip("/").lower()
        if not re.fullmatch(r"https?://[^/?#\s]+", o):
            raise ConfigError(f"gateway.allowed_origins[{i}]", f"{origin!r} is not an origin (scheme://host[:port])")
        out.append(o)
    return tuple(out)


def _upstream(name: str, t: dict[str, Any], env: Mapping[str, str]) -> UpstreamConfig:
    where = f"upstreams.{name}"
    _known(t, where, {"format", "base_url", "api_key", "timeouts", "headers", "extensions", "spare_connections"})
    fmt = t.get("format")
    if not isinstance(fmt, str):
        raise ConfigError(f"{where}.format", f"missing; one of {', '.join(FORMATS)}")
    if fmt not in FORMATS:
        raise ConfigError(f"{where}.format", f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    base_url = t.get("base_url")
    if fmt != LOCAL:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}.base_url", "must be an http:// or https:// URL")
        base_url = base_url.rstrip("/")
    api_key = t.get("api_key")
    if api_key is not None:
        if not isinstance(api_key, str):
            raise ConfigError(f"{where}.api_key", "must be a string")
        api_key = _expand(api_key, f"{where}.api_key", env) or None
    headers = t.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ConfigError(f"{where}.headers", "must be a table of strings")
    headers = {k: _expand(v, f"{where}.headers.{k}", env) for k, v in headers.items()}
    tt = _table(t, "timeouts", where)
    _known(tt, f"{where}.timeouts", {"connect", "first_byte", "idle", "total"})
    d = Timeouts()
    timeouts = Timeouts(
        *(_number(tt, k, f"{where}.timeouts", getattr(d, k)) for k in ("connect", "first_byte", "idle", "total"))
    )
    extensions = t.get("extensions", False)
    if not isinstance(extensions, bool):
        raise ConfigError(f"{where}.extensions", "must be true or false")
    spares = t.get("spare_connections", 1)
    if type(spares) is not int or not 0 <= spares <= MAX_SPARE_CONNECTIONS:
        raise ConfigError(f"{where}.spare_connections", f"must be an integer from 0 to {MAX_SPARE_CONNECTIONS}")
    return UpstreamConfig(name, fmt, base_url, api_key, timeouts, headers, extensions, spares)


def _model(t: dict[str, Any], where: str, upstreams: dict[str, UpstreamConfig]) -> ModelConfig:
    _known(
        t,
        where,
        {"name", "upstream", "upstreams", "upstream_model", "price", "kind", "routing", "deployments", "retries",
         "cooldown", "cache", "cache_scope"},
    )  # fmt: skip
    kind = t.get("kind", "chat")
    if kind not in MODEL_KINDS:
        raise ConfigError(f"{where}.kind", f"must be one of {', '.join(MODEL_KINDS)}")
    name = t.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name", "missing (the model name clients ask for)")
    routing = t.get("routing", "ordered")
    if routing not in ROUTING:
        raise ConfigError(f"{where}.routing", f"must be one of {', '.join(repr(r) for r in ROUTING)}, not {routing!r}")
    retries = _retries(t["retries"], f"{where}.retries") if "retries" in t else None
    try:
        price = _pricing.parse_price(t["price"], f"{where}.price") if "price" in t else None
        if "cache_scope" in t and "cache" not in t:
            raise ValueError(f"{where}.cache_scope", "applies to a model with a cache: set cache = { ... } too")
        cache = _cache.parse_policy(t["cache"], t.get("cache_scope"), where) if "cache" in t else None
    except ValueError as exc:
        raise ConfigError(*exc.args) from None
    if cache is not None and kind != "chat":
        raise ConfigError(f"{where}.cache", "a response cache applies to chat models only")
    if "deployments" in t:
        for other in ("upstream", "upstreams", "upstream_model"):
            if other in t:
                raise ConfigError(f"{where}.{other}", "set either deployments = [...] or upstream(s), not both")
        deployments = _deployments(t["deployments"], f"{where}.deployments", name, upstreams)
        cooldown = _cooldown(t["cooldown"], f"{where}.cooldown") if "cooldown" in t else Cooldown()
        routes = tuple(Route(d.upstream, d.model) for d in deployments)
        return ModelConfig(name, routes, price, kind, routing, deployments, retries, cooldown, cache)
    cooldown = _cooldown(t["cooldown"], f"{where}.cooldown") if "cooldown" in t else NO_COOLDOWN
    if ("upstream" in t) == ("upstreams" in t):
        raise ConfigError(
            f"{where}.upstream", 'set exactly one of upstream = "NAME", upstreams = ["A", "B"] or deployments = [...]'
        )
    if "upstream" in t:
        key, names = f"{where}.upstream", [t["upstream"]]
    else:
        key, names = f"{where}.upstreams", t["upstreams"]
        if not isinstance(names, list) or not names:
            raise ConfigError(key, "must be a non-empty array of upstream names")
    upstream_model = t.get("upstream_model", name)
    plain: list[Route] = []
    for i, up in enumerate(names):
        k = key if "upstream" in t else f"{key}[{i}]"
        if not isinstance(up, str):
            raise ConfigError(k, "must be a string (an upstream name)")
        if up not in upstreams:
            known = ", ".join(upstreams) or "none defined"
            raise ConfigError(k, f"unknown upstream {up!r} (known: {known})")
        if isinstance(upstream_model, dict):  # per-upstream names: {openai = "gpt-4o", azure = "gpt4o-prod"}
            target = upstream_model.get(up, name)
        else:
            target = upstream_model
        if not isinstance(target, str):
            raise ConfigError(f"{where}.upstream_model", "must be a string or a table of strings by upstream")
        plain.append(Route(up, target))
    return ModelConfig(name, tuple(plain), price, kind, routing, retries=retries, cooldown=cooldown, cache=cache)


def _deployments(value: Any, key: str, name: str, upstreams: dict[str, UpstreamConfig]) -> tuple[Deployment, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(key, "must be a non-empty array of tables ({ upstream = ..., model = ... })")
    out = []
    for i, entry in enumerate(value):
        where = f"{key}[{i}]"
        t = _as_table(entry, where)
        _known(t, where, {"upstream", "model", "weight", "rpm", "tpm", "fallback"})
        up = t.get("upstream")
        if not isinstance(up, str):
            raise ConfigError(f"{where}.upstream", "missing (an upstream name)")
        if up not in upstreams:
            known = ", ".join(upstreams) or "none defined"
            raise ConfigError(f"{where}.upstream", f"unknown upstream {up!r} (known: {known})")
        model = t.get("model", name)
        if not isinstance(model, str) or not model:
            raise ConfigError(f"{where}.model", "must be a non-empty string (the upstream's model name)")
        weight = t.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight < 1e9:
            raise ConfigError(f"{where}.weight", f"must be a positive number, not {weight!r}")
        limits = []
        for k in ("rpm", "tpm"):
            v = t.get(k)
            if v is not None and (type(v) is not int or v <= 0):
                raise ConfigError(f"{where}.{k}", f"must be a positive integer, not {v!r}")
            limits.append(v)
        fallback = t.get("fallback", False)
        if not isinstance(fallback, bool):
            raise ConfigError(f"{where}.fallback", "must be true or false")
        out.append(Deployment(up, model, float(weight), limits[0], limits[1], fallback))
    if all(d.fallback for d in out):
        raise ConfigError(key, "at least one deployment must not be a fallback")
    return tuple(out)


def _retries(value: Any, key: str) -> Retries:
    t = _as_table(value, key)
    _known(t, key, {"attempts", "backoff_ms", "max_backoff_ms"})
    attempts = t.get("attempts")
    if attempts is None:
        attempts = 0  # one per (non-fallback) deployment: ModelConfig fills it in
    elif type(attempts) is not int or not 1 <= attempts <= 20:
        raise ConfigError(f"{key}.attempts", f"must be an integer from 1 to 20 (1: no retry), not {attempts!r}")
    backoff = _milliseconds(t, "backoff_ms", key, 100.0)
    most = _milliseconds(t, "max_backoff_ms", key, max(4000.0, backoff))
    if most < backoff:
        raise ConfigError(f"{key}.max_backoff_ms", f"must be at least backoff_ms ({backoff:g})")
    return Retries(attempts, backoff, most)


def _milliseconds(t: dict[str, Any], name: str, where: str, default: float) -> float:
    value = t.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 3_600_000:
        raise ConfigError(f"{where}.{name}", f"must be a number of milliseconds from 0 to 3600000, not {value!r}")
    return float(value)


def _cooldown(value: Any, key: str) -> Cooldown:
    t = _as_table(value, key)
    _known(t, key, {"failures", "seconds"})
    failures = t.get("failures", 3)
    if type(failures) is not int or not 0 <= failures <= 1000:
        raise ConfigError(f"{key}.failures", f"must be an integer from 0 (off) to 1000, not {failures!r}")
    seconds = t.get("seconds", 30)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= 86400:
        raise ConfigError(f"{key}.seconds", f"must be a number of seconds in (0, 86400], not {seconds!r}")
    return Cooldown(failures, float(seconds))


# --------------------------------------------------------------------------- helpers


def _expand(value: str, key: str, env: Mapping[str, str]) -> str:
    """``${VAR}`` and ``${VAR:-default}`` from the environment; an unset VAR is an error."""

    def sub(m: re.Match[str]) -> str:
        var: str = m[1]
        default: str | None = m[2]  # None: no ":-" part (an empty default is "")
        if var in env:
            return env[var]
        if default is not None:
            return default
        raise ConfigError(key, f"environment variable {var} is not set")

    return _ENV.sub(sub, value)


def _table(t: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    return _as_table(t.get(name, {}), f"{where}.{name}" if where else name)


def _as_table(value: Any, key: str) -> dict[str, Any]:
    """``value`` if it is a TOML table (its keys are strings), else a :class:`ConfigError`."""
    if not isinstance(value, dict):
        raise ConfigError(key, f"must be a table, not {type(value).__name__}")
    return value


def _number(t: dict[str, Any], name: str, where: str, default: float | None) -> float | None:
    value = t.get(name, default)
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
        return None if value is None else float(value)
    if value == 0 and not isinstance(value, bool):
        return None  # 0 turns a timeout off
    raise ConfigError(f"{where}.{name}", f"must be a positive number of seconds, not {value!r}")


def _positive_int(t: dict[str, Any], name: str, default: int) -> int:
    """``gateway.<name>`` as a positive integer (a TOML bool or float is refused), else a :class:`ConfigError`."""
    value = t.get(name, default)
    if type(value) is not int or value <= 0:
        raise ConfigError(f"gateway.{name}", "must be a positive integer")
    return value


def _seconds(t: dict[str, Any], name: str, default: float) -> float:
    """``gateway.<name>`` as a positive number of seconds (0 is refused here: no "off"), else a :class:`ConfigError`."""
    value = _number(t, name, "gateway", default)
    if value is None:
        raise ConfigError(f"gateway.{name}", "must be a positive number of seconds")
    return value


def _known(t: dict[str, Any], where: str, keys: set[str]) -> None:
    for key in t:
        if key not in keys:
            prefix = f"{where}." if where else ""
            raise ConfigError(f"{prefix}{key}", f"unknown key; known: {', '.join(sorted(keys))}")
