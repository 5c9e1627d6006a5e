"""``llmbridge serve --http2``: the gateway on Granian over h2c and TLS h2, every endpoint unchanged.

Real served processes on loopback (the replay upstream of the corpus behind them), httpx's
HTTP/2 client, compared with the same config served over HTTP/1.1 by uvicorn.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from llmbridge import bindings, conformance, dialects, hub, replay
from llmbridge.dialects.base import decode_all
from llmbridge.gateway import config, create_app
from tests.gateway_util import replay_config, serving
from tests.test_gateway_faults import request_for

CORPUS = Path(__file__).parent / "corpus"
MODELS = {
    "anthropic-messages": "claude-text-simple",
    "openai-chat": "hf-novita-text",
    "openai-responses": "openai-text",
    "gemini": "gemini20-text",
}


def self_signed(tmp: Path) -> tuple[str, str]:
    """A throwaway certificate for 127.0.0.1 / localhost (cert path, key path)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llmbridge-test")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)


class Served:
    """``llmbridge serve --http2`` (Granian) as a real process on a free loopback port."""

    def __init__(self, toml: Path, certfile: str | None = None, keyfile: str | None = None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"{'https' if certfile else 'http'}://127.0.0.1:{self.port}"
        self.argv = [
            sys.executable,
            "-m",
            "llmbridge",
            "serve",
            "--http2",
            "--config",
            str(toml),
            "--port",
            str(self.port),
        ]
        if certfile and keyfile:
            self.argv += ["--certfile", certfile, "--keyfile", keyfile]
        self.verify = trusting(certfile)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Served:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        with httpx.Client(verify=self.verify) as client:
            while True:
                try:
                    client.get(self.url + "/healthz", timeout=2)
                    return self
                except httpx.TransportError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        out = self.proc.communicate(timeout=5)[0] if self.proc.poll() is not None else b""
                        raise RuntimeError(f"serve --http2 did not start: {out[-500:]!r}") from None
                    time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.output = self.proc.communicate(timeout=15)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.output = self.proc.communicate()[0]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("h2")
    cert, key = self_signed(tmp)
    with serving(replay.create_app(CORPUS, seed=2)) as up:
        models = {m: (d, m) for d, m in MODELS.items()}
        models["tool"] = ("anthropic-messages", "claude-sonnet4-text-then-tool-use")
        models["slow"] = ("openai-chat", "hf-together-deepseek-r1-think-tags@delay-ms=30")
        raw = replay_config(up.url, models)
        cfg = config.parse(raw, env={})
        toml = tmp / "gw.toml"
        toml.write_text(to_toml(raw))
        with serving(create_app(cfg)) as h1, Served(toml) as h2c, Served(toml, cert, key) as h2:
            yield h1, h2c, h2, cert
        for served in (h2c, h2):
            assert b"Traceback" not in served.output, served.output[-2000:]


def to_toml(raw: dict) -> str:
    """The few shapes replay_config makes, as TOML (tomllib reads, nothing in the stdlib writes)."""
    lines = []
    for name, up in raw["upstreams"].items():
        lines += [f"[upstreams.{name}]", f'format = "{up["format"]}"', f'base_url = "{up["base_url"]}"']
    for model in raw["models"]:
        lines += [
            "[[models]]",
            f'name = "{model["name"]}"',
            f'upstream = "{model["upstream"]}"',
            f'upstream_model = "{model["upstream_model"]}"',
        ]
    return "\n".join(lines) + "\n"


def trusting(cert: str | None) -> ssl.SSLContext | bool:
    return ssl.create_default_context(cafile=cert) if cert else True


def h2_client(cert: str | None = None) -> httpx.Client:
    # http1=False on http:// is h2c with prior knowledge; on https:// ALPN offers h2 only
    return httpx.Client(http1=False, http2=True, verify=trusting(cert), timeout=30)


ENDPOINTS = [(d, stream) for d in [*MODELS, "llm-stream", "mmsp"] for stream in (True, False) if d != "mmsp" or stream]


@pytest.mark.parametrize("dialect,stream", ENDPOINTS, ids=[f"{d}-{'stream' if s else 'whole'}" for d, s in ENDPOINTS])
@pytest.mark.parametrize("over", ["h2c", "h2-tls"])
def test_every_endpoint_is_unchanged_over_http2(servers, dialect, stream, over):
    h1, h2c, h2, cert = servers
    model = MODELS.get(dialect, "claude-text-simple")
    path, body, headers = request_for(dialect, model, stream)
    server = h2c if over == "h2c" else h2
    with h2_client(cert) as client:
        r2 = client.post(server.url + path, json=body, headers=headers)
    r1 = httpx.post(h1.url + path, json=body, headers=headers, timeout=30)
    assert r2.http_version == "HTTP/2"
    assert r1.http_version == "HTTP/1.1"
    assert r2.status_code == r1.status_code == 200
    assert r2.headers["content-type"] == r1.headers["content-type"]
    if stream:
        codec = dialects.get(dialect)
        e1, e2 = decode_all(codec.StreamDecoder(), r1.content), decode_all(codec.StreamDecoder(), r2.content)
        assert hub.assemble(e2) == hub.assemble(e1)
    else:
        assert r2.json().keys() == r1.json().keys()


@pytest.mark.parametrize("path", ["/v1/models", "/v1beta/models", "/mmsp/v1/models", "/healthz", "/nope"])
def test_get_endpoints_over_h2c(servers, path):
    h1, h2c, _, _ = servers
    with h2_client() as client:
        r2 = client.get(h2c.url + path)
    r1 = httpx.get(h1.url + path)
    assert r2.http_version == "HTTP/2" and r2.status_code == r1.status_code
    if path == "/healthz":  # each server process answers with its own pid as "worker"
        assert {**r2.json(), "worker": 0} == {**r1.json(), "worker": 0}
    else:
        assert r2.content == r1.content


def test_many_concurrent_streams_share_one_h2_connection(servers):
    _, h2c, _, _ = servers

    async def main():
        async with httpx.AsyncClient(http1=False, http2=True, timeout=30) as client:
            path, body, headers = request_for("llm-stream", "claude-text-simple")

            async def one():
                r = await client.post(h2c.url + path, json=body, headers=headers)
                return r.http_version, hub.assemble(decode_all(dialects.get("llm-stream").StreamDecoder(), r.content))

            return await asyncio.gather(*(one() for _ in range(50)))

    results = asyncio.run(main())
    assert {v for v, _ in results} == {"HTTP/2"}
    assert all(resp.complete and resp.error is None for _, resp in results)


def test_binary_binding_over_h2(servers):
    _, _, h2, cert = servers
    path, body, headers = request_for("llm-stream", "claude-text-simple")
    with h2_client(cert) as client:
        r = client.post(h2.url + path, json=body, headers={**headers, "accept": bindings.BINARY_MEDIA_TYPE})
    assert r.http_version == "HTTP/2" and r.headers["content-type"] == bindings.BINARY_MEDIA_TYPE
    decoder = bindings.BinaryStreamDecoder()
    assert hub.assemble(decoder.feed(r.content) + decoder.close()).complete and decoder.violations == []


def test_conformance_suite_over_tls_http2(servers):
    _, _, h2, cert = servers
    report = conformance.run(
        h2.url, "claude-text-simple", tool_model="tool", cancel_model="slow", http2=True, verify=cert, timeout=30
    )
    assert report.ok, conformance.to_text(report)
    assert report.status_of("ws.stream") == "pass"  # wss through Granian's WebSocket support


def test_certfile_without_keyfile_is_a_clean_error():
    done = subprocess.run(
        [sys.executable, "-m", "llmbridge", "serve", "--http2", "--certfile", "x.pem"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "--certfile and --keyfile go together" in done.stderr
    assert "Traceback" not in done.stderr


def test_conformance_cli_over_h2c(servers, tmp_path):
    _, h2c, _, _ = servers
    junit = tmp_path / "h2c.xml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmbridge",
            "conformance",
            h2c.url,
            "--model",
            "claude-text-simple",
            "--tool-model",
            "tool",
            "--cancel-model",
            "slow",
            "--http2",
            "--junit",
            str(junit),
            "--timeout",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(conformance.CHECKS)} passed, 0 failed (0 MUST), 0 skipped" in done.stdout
