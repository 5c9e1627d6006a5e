"""The /ui console in a real browser: Selenium driving Debian's headless Chromium.

The gateway under test is a real uvicorn server with the embedded local model plus a replay
upstream (llmbridge.replay serving crafted captures) for the cases a model will not produce
on demand: markup in the output, an upstream error mid-stream.  Every test ends by checking
the browser console: no error may be logged, whatever was pasted or streamed.

Skipped (with the reason) when Chromium or its driver is missing, except on CI, where
.ci/run installs them and a skip would hide a broken console.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import httpx
import pytest

from llmbridge import dialects, hub
from llmbridge.dialects.base import decode_all
from llmbridge.gateway import config, create_app
from llmbridge.gateway._upstream import local_available
from llmbridge.replay import create_app as replay_app
from tests.conftest import CORPUS, ROOT
from tests.gateway_util import replay_config, serving

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"  # Debian's chromium-driver; never let Selenium Manager download one
IMG = ROOT / "docs" / "img"
STREAM_TIMEOUT = 180  # seconds for a local-model turn on a loaded 2-core machine (a bound, not a measurement)

if not (CHROMIUM and Path(CHROMEDRIVER).is_file()):
    reason = (
        "no browser: the console's browser tests need Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver)"
    )
    if os.environ.get("CI"):
        pytest.fail(reason + "; .ci/run should have installed them", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
if not local_available():
    pytest.skip("the local model is not installed (make .venv/.installed)", allow_module_level=True)

XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def _anthropic(texts: list[str], tail: str) -> bytes:
    def ev(name: str, data: str) -> str:
        return f"event: {name}\ndata: {data}\n\n"

    start = {
        "type": "message_start",
        "message": {
            "id": "msg_ui",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        },
    }
    out = ev("message_start", json.dumps(start))
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    out += ev("content_block_start", json.dumps(block))
    for text in texts:
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
        out += ev("content_block_delta", json.dumps(delta))
    if tail == "error":
        out += ev("error", '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded <b>now</b>"}}')
    else:
        out += ev("content_block_stop", '{"type":"content_block_stop","index":0}')
        out += ev(
            "message_delta",
            '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
            '"usage":{"output_tokens":12}}',
        )
        out += ev("message_stop", '{"type":"message_stop"}')
    return out.encode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    captures = tmp_path_factory.mktemp("captures")
    (captures / "anthropic-messages").mkdir()
    (captures / "anthropic-messages" / "markup.sse").write_bytes(_anthropic(["Look: ", XSS, " done"], "end"))
    (captures / "anthropic-messages" / "breaks.sse").write_bytes(_anthropic(["Half an ans", "wer and then"], "error"))
    for name in ("claude-thinking-then-tool-use",):  # a real capture: thinking, text and a tool call
        (captures / "anthropic-messages" / f"{name}.sse").write_bytes(
            (CORPUS / "anthropic-messages" / f"{name}.sse").read_bytes()
        )
    with serving(replay_app(captures, delay_ms=5)) as replay:
        raw = replay_config(
            replay.url,
            {
                "markup": ("anthropic-messages", "markup"),
                "breaks": ("anthropic-messages", "breaks"),
                "thinks": ("anthropic-messages", "claude-thinking-then-tool-use"),
            },
            extra_upstreams={"local": {"format": "local"}},
        )
        raw["models"].insert(0, {"name": "local", "upstream": "local"})
        with serving(create_app(config.parse(raw))) as server:
            yield server


@pytest.fixture(scope="module")
def driver():
    os.environ.setdefault("SE_OFFLINE", "true")  # belt and braces: Selenium Manager must not go online
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1440,1000",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    d = webdriver.Chrome(options=options, service=service)
    d.set_script_timeout(30)
    try:
        yield d
    finally:
        d.quit()


def console_errors(d) -> list[str]:
    return [e["message"] for e in d.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def open_page(d, gateway, page: str) -> None:
    d.get(f"{gateway.url}/ui#{page}")
    d.refresh()  # a fresh page each test (get() of the same URL with a #fragment does not reload)
    WebDriverWait(d, 30).until(lambda d: d.execute_script("return document.body.dataset.ready === 'true'"))
    d.find_element(By.ID, f"tab-{page}").click()


def hook(d, name: str):
    return d.find_element(By.CSS_SELECTOR, f'[data-test="{name}"]')


def watch_answer(d) -> None:
    """Record every distinct text the answer shows, as the DOM changes."""
    d.execute_script("""
        const answer = document.querySelector('[data-test=answer]');
        window.__texts = [];
        new MutationObserver(() => {
            const t = answer.textContent;
            if (window.__texts[window.__texts.length - 1] !== t) window.__texts.push(t);
        }).observe(answer, {childList: true, subtree: true, characterData: true});
    """)


def send(d, model: str, prompt: str, max_tokens: int = 24, keyboard: bool = False) -> str:
    """Send a playground turn; the answer's final data-state (done | error)."""
    Select(hook(d, "model")).select_by_value(model)
    box = hook(d, "prompt")
    box.clear()
    box.send_keys(prompt)
    details = d.find_element(By.CSS_SELECTOR, "#pg-form details")
    if not details.get_attribute("open"):
        details.find_element(By.TAG_NAME, "summary").click()
    tokens = d.find_element(By.ID, "pg-max-tokens")
    tokens.clear()
    tokens.send_keys(str(max_tokens))
    watch_answer(d)
    if keyboard:
        box.send_keys(Keys.CONTROL, Keys.ENTER)
    else:
        hook(d, "send").click()
    answer = hook(d, "answer")
    WebDriverWait(d, STREAM_TIMEOUT).until(lambda _: answer.get_attribute("data-state") in ("done", "error"))
    return answer.get_attribute("data-state")


def pane_wire(d, dialect: str) -> bytes:
    """The bytes a dialect pane shows (its wire rows, without the timing column)."""
    rows = d.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(r => r.lastChild.textContent);",
        f'[data-test="pane-{dialect}"] .wire .ev:not(.hub)',
    )
    return "".join(r + "\n\n" for r in rows).encode()


def shoot(d, name: str, height: int = 1000) -> None:
    """A screenshot at a laptop's width (``height``: enough to show the page).

    Into docs/img/ (the pictures in docs/ui.md) only with ``UI_SCREENSHOTS=1``, so that a test
    run does not rewrite tracked files; otherwise into a temporary directory.
    """
    folder = IMG if os.environ.get("UI_SCREENSHOTS") else Path(tempfile.gettempdir()) / "llmbridge-ui-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    d.set_window_size(1440, height)
    try:
        assert d.save_screenshot(str(folder / name))
    finally:
        d.set_window_size(1440, 1000)


# --------------------------------------------------------------------------- playground


def test_playground_streams_the_local_model_in_six_dialects(driver, gateway):
    open_page(driver, gateway, "playground")
    state = send(driver, "local", "Name three colours of the rainbow.", max_tokens=24)
    assert state == "done", hook(driver, "error").text
    answer = hook(driver, "answer").text
    texts = driver.execute_script("return window.__texts")
    # Streamed: the answer grew in at least two visible steps before its final text.
    growing = [t for t in texts[:-1] if t and answer.startswith(t.strip()) and len(t.strip()) < len(answer)]
    assert len(set(growing)) >= 2, texts
    assert driver.find_element(By.ID, "st-ttft").text.endswith(("ms", " s"))
    assert driver.find_element(By.ID, "st-usage").text.endswith("/ 24")
    for dialect in dialects.NAMES:
        pane = hook(driver, f"pane-{dialect}")
        assert pane.get_attribute("data-valid") == "true", pane.text[-500:]
        # What the pane shows is that dialect's valid stream of this very answer.
        decoder = dialects.get(dialect).StreamDecoder()
        events = decode_all(decoder, pane_wire(driver, dialect))
        assert decoder.violations == [] and hub.validate(events) == [], dialect
        response = hub.assemble(events)
        assert "".join(b.text for b in response.blocks if b.kind == "text").strip() == answer.strip(), dialect
    hook(driver, "show-hub").click()  # the hub events in between, on demand
    hub_rows = driver.find_elements(By.CSS_SELECTOR, '[data-test="pane-openai-chat"] .ev.hub')
    assert hub_rows and hub_rows[0].is_displayed() and "ResponseStart" in hub_rows[0].text
    hook(driver, "show-hub").click()
    driver.execute_script("window.scrollTo(0, 0)")
    shoot(driver, "ui-playground.png", 1450)
    assert console_errors(driver) == []


def test_markup_in_model_output_is_shown_never_run(driver, gateway):
    open_page(driver, gateway, "playground")
    assert send(driver, "markup", "anything", keyboard=True) == "done"
    answer = hook(driver, "answer")
    assert XSS in answer.text
    assert answer.find_elements(By.CSS_SELECTOR, "script, img") == []
    assert driver.execute_script("return window.__pwned") is None
    assert all(hook(driver, f"pane-{d}").get_attribute("data-valid") == "true" for d in dialects.NAMES)
    assert console_errors(driver) == []


def test_upstream_error_mid_stream_is_a_readable_message(driver, gateway):
    open_page(driver, gateway, "playground")
    assert send(driver, "breaks", "anything") == "error"
    error = hook(driver, "error")
    assert error.is_displayed() and "overloaded" in error.text and "Overloaded <b>now</b>" in error.text
    assert "Half an answer and then" in hook(driver, "answer").text  # what came before stays
    # Every pane ends with its dialect's own error event and terminal event: still valid streams.
    for dialect in dialects.NAMES:
        assert hook(driver, f"pane-{dialect}").get_attribute("data-valid") == "true", dialect
        events = decode_all(dialects.get(dialect).StreamDecoder(), pane_wire(driver, dialect))
        assert [type(e) for e in events[-2:]] == [hub.Error, hub.ResponseEnd], dialect
    assert driver.execute_script("return document.body.dataset.ready") == "true"
    assert console_errors(driver) == []


# --------------------------------------------------------------------------- translator


def paste(d, text: str) -> None:
    """Put ``text`` in the translator's input as a paste would (send_keys is far too slow for MBs)."""
    d.execute_script(
        "const t = document.querySelector('[data-test=translator-input]'); t.value = arguments[0];"
        "t.dispatchEvent(new Event('input', {bubbles: true}));",
        text,
    )


def translate(d, source: str = "auto", target: str = "openai-chat") -> None:
    """Run the translator and wait until the page has shown the result."""
    Select(hook(d, "translator-from")).select_by_value(source)
    Select(hook(d, "translator-to")).select_by_value(target)
    button = hook(d, "translator-run")
    runs = int(button.get_attribute("data-runs") or 0)
    button.click()
    WebDriverWait(d, 60).until(lambda _: int(button.get_attribute("data-runs") or 0) > runs)


def test_translator_translates_a_corpus_capture(driver, gateway):
    open_page(driver, gateway, "translator")
    path = CORPUS / "anthropic-messages" / "claude-sonnet4-text-then-tool-use.sse"
    data = path.read_bytes()
    paste(driver, data.decode())
    translate(driver, "auto", "openai-chat")
    encoder = dialects.get("openai-chat").StreamEncoder()
    expected = b"".join(encoder.encode(e) for e in decode_all(dialects.get("anthropic-messages").StreamDecoder(), data))
    output = driver.execute_script("return document.querySelector('[data-test=translator-output]').textContent")
    assert output == expected.decode()
    assert "detected anthropic-messages" in hook(driver, "translator-status").text
    assert "no problems" in hook(driver, "translator-problems").text
    download = driver.find_element(By.ID, "tr-download")
    assert download.is_enabled()
    download.click()  # a Blob download of the whole translation; must not trip the page
    shoot(driver, "ui-translator.png")
    assert console_errors(driver) == []


def test_translator_bad_input_is_readable(driver, gateway, tmp_path):
    open_page(driver, gateway, "translator")
    error = hook(driver, "translator-error")
    # Not SSE at all.
    paste(driver, "<html><body><h1>502 Bad Gateway</h1></body></html>")
    translate(driver)
    assert error.is_displayed() and "not an SSE stream" in error.text
    assert driver.find_elements(By.CSS_SELECTOR, "[data-test=translator-output] h1") == []
    # Truncated: the problem is listed and the cut-off shows at the end of the source events.
    data = (CORPUS / "anthropic-messages" / "claude-sonnet4-text-then-tool-use.sse").read_text()
    paste(driver, data[: len(data) // 2])
    translate(driver, "anthropic-messages", "gemini")
    problems = hook(driver, "translator-problems").text
    assert "truncated" in problems and "stream ended before its terminal event" in problems
    assert driver.find_elements(By.CSS_SELECTOR, "[data-test=translator-problem-event]")
    shoot(driver, "ui-translator-problems.png")
    # A broken event in the middle is highlighted where it is.
    lines = data.split("\n\n")
    lines[2] = "event: content_block_delta\ndata: {oops"
    paste(driver, "\n\n".join(lines))
    translate(driver, "anthropic-messages", "gemini")
    bad = driver.find_element(By.ID, "tr-frame-2")
    assert "bad" in bad.get_attribute("class") and "json" in bad.text
    # Markup in a pasted stream: text on the page, never run.
    pasted = _anthropic(["<script>window.__pwned = 3</script>", '<img src=x onerror="window.__pwned = 4">'], "end")
    paste(driver, pasted.decode())
    translate(driver, "auto", "llm-stream")
    assert "<script>window.__pwned = 3</script>" in hook(driver, "translator-output").text
    page = driver.find_element(By.ID, "page-translator")
    assert page.find_elements(By.CSS_SELECTOR, "script, img") == []
    assert driver.execute_script("return window.__pwned") is None
    # 50 MB pasted: refused before it lands in the text area, with a readable message.
    driver.execute_script(
        "const t = document.querySelector('[data-test=translator-input]'); const dt = new DataTransfer();"
        "dt.setData('text/plain', 'data: x\\n\\n'.repeat(50 * 1024 * 1024 / 9));"
        "t.dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));"
    )
    WebDriverWait(driver, 30).until(lambda _: "MB" in error.text)
    assert "52.4 MB" in error.text and "llmbridge translate" in error.text
    assert len(hook(driver, "translator-input").get_attribute("value")) < 1_000_000
    # 50 MB as a file: refused by its size, before it is read.
    big = tmp_path / "big.sse"
    big.write_bytes(b"data: x\n\n" * (50 * 1024 * 1024 // 9))
    paste(driver, "")
    driver.find_element(By.ID, "tr-file").send_keys(str(big))
    WebDriverWait(driver, 30).until(lambda _: "52.4 MB" in error.text)
    paste(driver, "")
    assert console_errors(driver) == []


# --------------------------------------------------------------------------- traffic


def test_traffic_shows_requests_and_their_timeline(driver, gateway):
    body = {"model": "markup", "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "private"}]}
    r = httpx.post(gateway.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 200
    open_page(driver, gateway, "traffic")
    WebDriverWait(driver, 30).until(
        lambda d: any("markup" in row.text for row in d.find_elements(By.CSS_SELECTOR, '[data-test="traffic-row"]'))
    )
    rows = driver.find_elements(By.CSS_SELECTOR, '[data-test="traffic-row"]')
    row = next(r for r in rows if "markup" in r.text and "anthropic-messages" in r.text)
    assert "ok" in row.text and "private" not in driver.find_element(By.ID, "page-traffic").text
    driver.execute_script("arguments[0].focus()", row)
    row.send_keys(Keys.ENTER)  # keyboard: a focused row opens with Enter
    detail = hook(driver, "traffic-detail")
    try:
        WebDriverWait(driver, 15).until(lambda _: "Timeline of request" in detail.text)
    except TimeoutException:
        pytest.fail(f"no timeline: {detail.text}")
    assert "ResponseStart" in detail.text and "Delta" in detail.text
    deployments = driver.find_elements(By.CSS_SELECTOR, '[data-test="deployment-row"]')
    assert any(d.text.startswith("markup ") and " ok " in f" {d.text} " for d in deployments)  # routing state
    shoot(driver, "ui-traffic.png")
    assert console_errors(driver) == []


# --------------------------------------------------------------------------- tools, keyboard, access

WEATHER = [
    {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 24}},
            "required": ["city"],
            "additionalProperties": False,
        },
    }
]


def test_playground_tool_call_streams_in_every_dialect(driver, gateway):
    open_page(driver, gateway, "playground")
    details = driver.find_element(By.CSS_SELECTOR, "#pg-form details")
    details.find_element(By.TAG_NAME, "summary").click()
    tools = driver.find_element(By.ID, "pg-tools")
    driver.execute_script("arguments[0].value = arguments[1]", tools, json.dumps(WEATHER))
    choice = driver.find_element(By.ID, "pg-tool-choice")
    choice.clear()
    choice.send_keys("get_weather")
    assert send(driver, "local", "What's the weather in Paris?", max_tokens=48) == "done", hook(driver, "error").text
    (call,) = hook(driver, "answer").find_elements(By.CSS_SELECTOR, '[data-test="tool-call"]')
    name = call.find_element(By.CSS_SELECTOR, ".name").text
    arguments = json.loads(call.find_element(By.CSS_SELECTOR, ".args").text)
    assert name == "get_weather" and set(arguments) == {"city"}
    for dialect in dialects.NAMES:
        assert hook(driver, f"pane-{dialect}").get_attribute("data-valid") == "true", dialect
        response = hub.assemble(decode_all(dialects.get(dialect).StreamDecoder(), pane_wire(driver, dialect)))
        (block,) = [b for b in response.blocks if b.kind == "tool_call"]
        assert (block.name, json.loads(block.text)) == ("get_weather", arguments), dialect
    assert console_errors(driver) == []


def test_thinking_text_and_tool_call_render_apart(driver, gateway):
    open_page(driver, gateway, "playground")
    assert send(driver, "thinks", "anything") == "done", hook(driver, "error").text
    answer = hook(driver, "answer")
    data = (CORPUS / "anthropic-messages" / "claude-thinking-then-tool-use.sse").read_bytes()
    expected = hub.assemble(decode_all(dialects.get("anthropic-messages").StreamDecoder(), data))
    thinking = [b.text for b in expected.blocks if b.kind == "thinking"]
    shown = [e.text.removeprefix("thinking: ") for e in answer.find_elements(By.CSS_SELECTOR, ".block.thinking")]
    assert thinking and [t.strip() for t in shown] == [t.strip() for t in thinking]
    calls = answer.find_elements(By.CSS_SELECTOR, '[data-test="tool-call"]')
    assert [c.find_element(By.CSS_SELECTOR, ".name").text for c in calls] == [
        b.name for b in expected.blocks if b.kind == "tool_call"
    ]
    assert all(hook(driver, f"pane-{d}").get_attribute("data-valid") == "true" for d in dialects.NAMES)
    assert console_errors(driver) == []


def test_tabs_work_from_the_keyboard(driver, gateway):
    open_page(driver, gateway, "playground")
    tab = driver.find_element(By.ID, "tab-playground")
    tab.send_keys(Keys.ARROW_RIGHT)
    assert driver.find_element(By.ID, "page-translator").is_displayed()
    assert driver.switch_to.active_element.get_attribute("id") == "tab-translator"
    driver.switch_to.active_element.send_keys(Keys.ARROW_RIGHT)
    assert driver.find_element(By.ID, "page-traffic").is_displayed() and driver.current_url.endswith("#traffic")
    driver.switch_to.active_element.send_keys(Keys.ARROW_RIGHT)
    assert driver.find_element(By.ID, "page-playground").is_displayed()
    assert console_errors(driver) == []


def test_login_with_the_admin_key(driver):
    raw = {
        "gateway": {"api_keys": ["client-key"], "ui_key": "admin-key-0123456789"},
        "upstreams": {"local": {"format": "local"}},
        "models": [{"name": "local", "upstream": "local"}],
    }
    with serving(create_app(config.parse(raw))) as server:
        driver.get(server.url + "/ui")
        key = hook(driver, "ui-key")
        key.send_keys("admin-key-0123456789", Keys.ENTER)
        WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready === 'true'"))
        assert [o.text for o in Select(hook(driver, "model")).options] == ["local"]
        driver.get_log("browser")  # the login page's 401 is logged as a failed resource: not the console's
    driver.get("about:blank")
