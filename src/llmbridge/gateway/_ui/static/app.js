// llmbridge console. Plain modern JS, no library, no build step.
// Everything that came from a model, an upstream or a paste goes into the page through
// textContent / createTextNode only (never innerHTML): markup in it is shown, never run.
// The CSP (script-src 'self') is the second wall.

const API = "/ui/api";
const HEADERS = { "x-llmbridge-console": "1" };
const PANE_ROWS = 3000; // rows kept per dialect pane; older ones are dropped (memory bound)
const SHOWN_OUTPUT = 1_000_000; // characters of a translation shown; Download has all of it

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role" || k === "tabindex") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function show(node, message) {
  node.textContent = message || "";
  node.hidden = !message;
}

function fmtMs(v) {
  if (v === null || v === undefined) return "–";
  return v >= 10000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`;
}

function fmtBytes(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB`;
  return `${n} B`;
}

/** fetch + JSON, with every failure turned into an Error whose message a person can read. */
async function api(path, options = {}) {
  let response;
  try {
    response = await fetch(API + path, { ...options, headers: { ...HEADERS, ...(options.headers || {}) } });
  } catch (err) {
    throw new Error(`The gateway did not answer (${err.message}). Is it still running?`);
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    throw new Error(`The gateway answered ${response.status} without a readable body.`);
  }
  if (!response.ok) {
    if (response.status === 401) throw new Error("The console session ended: reload the page to log in again.");
    throw new Error((body && body.error && body.error.message) || `The gateway answered ${response.status}.`);
  }
  return body;
}

let INFO = { models: [], dialects: [], sources: [], max_paste_bytes: 16 * 1024 * 1024, traffic: {} };

// ---------------------------------------------------------------------------------- tabs

const PAGES = ["playground", "translator", "traffic"];

function selectPage(name, focus = false) {
  if (!PAGES.includes(name)) name = "playground";
  for (const p of PAGES) {
    const tab = $(`tab-${p}`);
    tab.setAttribute("aria-selected", String(p === name));
    tab.tabIndex = p === name ? 0 : -1;
    $(`page-${p}`).hidden = p !== name;
  }
  if (focus) $(`tab-${name}`).focus();
  if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
  if (name === "traffic") Traffic.start();
  else Traffic.stop();
}

function setupTabs() {
  for (const p of PAGES) $(`tab-${p}`).addEventListener("click", () => selectPage(p));
  // Arrow keys move between tabs (the WAI-ARIA tabs pattern).
  document.querySelector("nav[role=tablist]").addEventListener("keydown", (e) => {
    const i = PAGES.indexOf(document.activeElement?.dataset?.page);
    if (i < 0) return;
    if (e.key === "ArrowRight") selectPage(PAGES[(i + 1) % PAGES.length], true);
    else if (e.key === "ArrowLeft") selectPage(PAGES[(i + PAGES.length - 1) % PAGES.length], true);
    else return;
    e.preventDefault();
  });
  window.addEventListener("hashchange", () => selectPage(location.hash.slice(1)));
  selectPage(location.hash.slice(1));
}

// ---------------------------------------------------------------------------- playground

const Playground = {
  controller: null,
  panes: {},
  blocks: new Map(),

  setup() {
    const models = $("pg-model");
    for (const m of INFO.models) models.append(el("option", { value: m, text: m }));
    if (!INFO.models.length) models.append(el("option", { value: "", text: "(no model configured)" }));
    const panes = $("panes");
    for (const d of INFO.dialects) {
      const wire = el("div", { class: "wire", role: "log", "aria-label": `${d} stream`, tabindex: "0" });
      const badge = el("span", { class: "badge", text: "idle" });
      const count = el("span", { class: "count muted small", text: "" });
      const problems = el("ul", { class: "problems", hidden: true });
      panes.append(el("section", { class: "pane", "data-test": `pane-${d}`, "data-dialect": d },
        el("header", {}, el("h3", { text: d }), badge, count), wire, problems));
      this.panes[d] = { wire, badge, count, problems, events: 0 };
    }
    $("pg-show-hub").addEventListener("change", (e) => panes.classList.toggle("show-hub", e.target.checked));
    $("pg-form").addEventListener("submit", (e) => { e.preventDefault(); this.send(); });
    $("pg-prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.send(); }
    });
    $("pg-stop").addEventListener("click", () => this.controller?.abort());
  },

  reset() {
    const answer = $("pg-answer");
    answer.replaceChildren();
    answer.dataset.state = "streaming";
    this.blocks = new Map();
    show($("pg-error"), "");
    for (const id of ["st-ttft", "st-tps", "st-usage", "st-finish", "st-duration", "st-upstream"]) $(id).textContent = "–";
    for (const pane of Object.values(this.panes)) {
      pane.wire.replaceChildren();
      pane.events = 0;
      pane.count.textContent = "";
      pane.badge.className = "badge";
      pane.badge.textContent = "streaming";
      pane.problems.replaceChildren();
      pane.problems.hidden = true;
    }
  },

  request() {
    const body = {
      model: $("pg-model").value,
      prompt: $("pg-prompt").value,
      system: $("pg-system").value || undefined,
      max_tokens: Number($("pg-max-tokens").value) || 128,
    };
    const temperature = $("pg-temperature").value;
    if (temperature !== "") body.temperature = Number(temperature);
    const tools = $("pg-tools").value.trim();
    if (tools) {
      try {
        body.tools = JSON.parse(tools);
      } catch (err) {
        throw new Error(`Tools: not valid JSON (${err.message}).`);
      }
      if (!Array.isArray(body.tools)) throw new Error("Tools: a JSON array of {name, description, parameters}.");
      body.tool_choice = $("pg-tool-choice").value.trim() || "auto";
    }
    return body;
  },

  async send() {
    if (this.controller) return; // one turn at a time
    let body;
    try {
      body = this.request();
    } catch (err) {
      show($("pg-error"), err.message);
      return;
    }
    if (!body.prompt.trim()) {
      show($("pg-error"), "Write a message first.");
      $("pg-prompt").focus();
      return;
    }
    this.reset();
    this.controller = new AbortController();
    $("pg-send").disabled = true;
    $("pg-stop").disabled = false;
    let ended = false;
    try {
      let response;
      try {
        response = await fetch(`${API}/playground`, {
          method: "POST",
          headers: { ...HEADERS, "content-type": "application/json" },
          body: JSON.stringify(body),
          signal: this.controller.signal,
        });
      } catch (err) {
        throw new Error(err.name === "AbortError" ? "Stopped." : `The gateway did not answer (${err.message}).`);
      }
      if (!response.ok) {
        let message = `The gateway answered ${response.status}.`;
        try { message = (await response.json()).error.message || message; } catch { /* keep the status line */ }
        throw new Error(message);
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (err) {
          throw new Error(err.name === "AbortError" ? "Stopped." : `The stream broke off (${err.message}).`);
        }
        if (chunk.done) break;
        buffer += decoder.decode(chunk.value, { stream: true });
        let nl;
        while ((nl = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, nl);
          buffer = buffer.slice(nl + 1);
          if (line.trim()) ended = this.line(JSON.parse(line)) || ended;
        }
      }
      if (!ended) throw new Error("The stream ended before the console's end line: the gateway went away?");
      $("pg-answer").dataset.state = $("pg-answer").dataset.state === "error" ? "error" : "done";
    } catch (err) {
      show($("pg-error"), err.message);
      $("pg-answer").dataset.state = "error";
      for (const pane of Object.values(this.panes)) {
        if (pane.badge.textContent === "streaming") pane.badge.textContent = "stopped";
      }
    } finally {
      this.controller = null;
      $("pg-send").disabled = false;
      $("pg-stop").disabled = true;
    }
  },

  /** One NDJSON line from /ui/api/playground; true for the end line. */
  line(msg) {
    if (msg.kind === "start") {
      $("st-upstream").textContent = `${msg.upstream} (${msg.upstream_model})`;
    } else if (msg.kind === "fallback") {
      show($("pg-error"), `Upstream ${msg.upstream} failed before answering (${msg.message}); trying the next one.`);
    } else if (msg.kind === "event") {
      this.event(msg);
    } else if (msg.kind === "end") {
      this.end(msg);
      return true;
    }
    return false;
  },

  event(msg) {
    const hub = msg.hub;
    const t = `+${msg.t.toFixed(1)} ms`;
    for (const [dialect, text] of Object.entries(msg.out)) {
      const pane = this.panes[dialect];
      if (!pane) continue;
      const atBottom = pane.wire.scrollTop + pane.wire.clientHeight >= pane.wire.scrollHeight - 4;
      pane.wire.append(el("div", { class: "ev hub" }, el("span", { class: "t", text: t }), hubLine(hub)));
      if (text) {
        pane.events += (text.match(/\n\n/g) || []).length || 1;
        pane.wire.append(el("div", { class: "ev" }, el("span", { class: "t", text: t }), text.trimEnd()));
        pane.count.textContent = `${pane.events} events`;
      }
      while (pane.wire.childElementCount > PANE_ROWS) pane.wire.firstElementChild.remove();
      if (atBottom) pane.wire.scrollTop = pane.wire.scrollHeight;
    }
    this.render(hub);
  },

  /** The rendered answer: text, thinking and tool calls, block by block. */
  render(hub) {
    const answer = $("pg-answer");
    if (hub.event === "BlockStart") {
      let node;
      if (hub.kind === "tool_call") {
        const args = el("span", { class: "args" });
        node = el("div", { class: "block tool", "data-test": "tool-call" },
          el("span", { class: "name", text: hub.name || "tool" }), "(", args, ")");
        node.target = args;
      } else {
        node = el("div", { class: `block ${hub.kind}` });
        if (hub.kind === "data" || hub.kind === "native") node.append(`[${hub.kind} block ${hub.mime_type || ""}]`);
        node.target = node;
      }
      this.blocks.set(hub.index, node);
      answer.append(node);
    } else if (hub.event === "Delta") {
      const node = this.blocks.get(hub.index);
      if (node && node.classList.contains("data")) return; // base64: not worth showing
      if (node) node.target.append(document.createTextNode(hub.text));
      else answer.append(document.createTextNode(hub.text));
      answer.scrollTop = answer.scrollHeight;
    } else if (hub.event === "Usage") {
      $("st-usage").textContent = `${hub.input_tokens ?? "?"} / ${hub.output_tokens ?? "?"}`;
    } else if (hub.event === "Finish") {
      $("st-finish").textContent = hub.raw ? `${hub.reason} (${hub.raw})` : hub.reason;
    } else if (hub.event === "Error") {
      show($("pg-error"), `Upstream error mid-stream (${hub.type}${hub.status ? " " + hub.status : ""}): ${hub.message}`);
      answer.dataset.state = "error";
    }
  },

  end(msg) {
    $("st-ttft").textContent = fmtMs(msg.ttft_ms);
    $("st-tps").textContent = msg.tokens_per_s ?? "–";
    $("st-duration").textContent = fmtMs(msg.duration_ms);
    if (msg.usage) $("st-usage").textContent = `${msg.usage.input_tokens ?? "?"} / ${msg.usage.output_tokens ?? "?"}`;
    if (msg.finish) $("st-finish").textContent = msg.finish;
    if (msg.error) {
      const e = msg.error;
      show($("pg-error"), `Upstream error (${e.type}${e.status ? " " + e.status : ""}): ${e.message}`);
      $("pg-answer").dataset.state = "error";
    }
    for (const [dialect, check] of Object.entries(msg.checks || {})) {
      const pane = this.panes[dialect];
      if (!pane) continue;
      pane.badge.className = `badge ${check.ok ? "ok" : "bad"}`;
      pane.badge.textContent = check.ok ? "valid ✓" : `${check.problems.length} problem(s)`;
      pane.badge.title = check.ok ? `decodes back to ${check.events} hub events without a problem` : check.problems.join("\n");
      pane.problems.replaceChildren(...check.problems.map((p) => el("li", { text: p })));
      pane.problems.hidden = check.ok;
      pane.wire.closest(".pane").dataset.valid = String(check.ok);
    }
    if (!$("pg-answer").textContent.trim() && !msg.error) {
      $("pg-answer").append(el("p", { class: "muted", text: "(the model answered with no text)" }));
    }
  },
};

function hubLine(hub) {
  const { event, ...rest } = hub;
  return `hub ${event} ${JSON.stringify(rest)}`;
}

// ---------------------------------------------------------------------------- translator

const Translator = {
  output: "",
  outputType: "text/plain",

  setup() {
    const from = $("tr-from");
    for (const d of INFO.sources) from.append(el("option", { value: d, text: d }));
    const to = $("tr-to");
    for (const d of INFO.dialects) to.append(el("option", { value: d, text: d }));
    to.value = "llm-stream";
    $("tr-run").addEventListener("click", () => this.run());
    $("tr-input").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.run(); }
    });
    $("tr-file").addEventListener("change", (e) => this.file(e.target.files[0]));
    const input = $("tr-input");
    // A huge paste would freeze the text area itself: refuse it before it lands there.
    input.addEventListener("paste", (e) => {
      const text = e.clipboardData ? e.clipboardData.getData("text") : "";
      if (text.length > INFO.max_paste_bytes) {
        e.preventDefault();
        this.clear();
        show($("tr-error"), this.tooBig(new Blob([text]).size));
      }
    });
    input.addEventListener("dragover", (e) => e.preventDefault());
    input.addEventListener("drop", (e) => {
      if (!e.dataTransfer.files.length) return;
      e.preventDefault();
      this.file(e.dataTransfer.files[0]);
    });
    $("tr-download").addEventListener("click", () => this.download());
    $("tr-copy").addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(this.output);
        $("tr-status").textContent = "Copied.";
      } catch {
        $("tr-status").textContent = "The browser refused the clipboard: select the text instead.";
      }
    });
  },

  tooBig(bytes) {
    const max = INFO.max_paste_bytes;
    return `This body is ${fmtBytes(bytes)}; the console takes up to ${fmtBytes(max)}. ` +
      "For larger captures use the command line: llmbridge validate --format DIALECT FILE, " +
      "llmbridge translate --from A --to B FILE.";
  },

  async file(file) {
    if (!file) return;
    show($("tr-error"), "");
    if (file.size > INFO.max_paste_bytes) {
      show($("tr-error"), this.tooBig(file.size));
      return;
    }
    try {
      $("tr-input").value = await file.text();
      $("tr-status").textContent = `Loaded ${file.name} (${fmtBytes(file.size)}).`;
    } catch (err) {
      show($("tr-error"), `Cannot read ${file.name}: ${err.message}`);
    }
  },

  clear() {
    for (const id of ["tr-frames", "tr-events", "tr-problems"]) $(id).replaceChildren();
    for (const id of ["tr-frames-count", "tr-events-count", "tr-target"]) $(id).textContent = "";
    $("tr-output").textContent = "";
    this.output = "";
    $("tr-download").disabled = $("tr-copy").disabled = true;
  },

  async run() {
    show($("tr-error"), "");
    const text = $("tr-input").value;
    // Size first, cheaply: a character is at least one UTF-8 byte.
    if (text.length > INFO.max_paste_bytes) {
      this.clear();
      show($("tr-error"), this.tooBig(text.length));
      return;
    }
    const body = new TextEncoder().encode(text);
    if (body.length > INFO.max_paste_bytes) {
      this.clear();
      show($("tr-error"), this.tooBig(body.length));
      return;
    }
    if (!text.trim()) {
      this.clear();
      show($("tr-error"), "Paste a captured response body first (or drop a file on the text area).");
      return;
    }
    const params = new URLSearchParams({ from: $("tr-from").value, to: $("tr-to").value });
    $("tr-run").disabled = true;
    $("tr-status").textContent = `Decoding ${fmtBytes(body.length)}…`;
    try {
      const report = await api(`/translate?${params}`, {
        method: "POST", body, headers: { "content-type": "application/octet-stream" },
      });
      this.show(report);
    } catch (err) {
      this.clear();
      $("tr-status").textContent = "";
      show($("tr-error"), err.message);
    } finally {
      $("tr-run").disabled = false;
      $("tr-run").dataset.runs = String(Number($("tr-run").dataset.runs || 0) + 1); // for tests: one more run done
    }
  },

  show(r) {
    this.clear();
    if (r.fatal) {
      $("tr-status").textContent = "";
      show($("tr-error"), r.fatal);
      $("tr-problems").append(el("li", { class: "problem", text: r.fatal }));
      return;
    }
    const how = r.detected ? `detected ${r.source} (${r.detection})` : `read as ${r.source}`;
    $("tr-status").textContent = `${how}; ${r.frames_total} source events → ${r.events_total} hub events → ${r.target}.`;
    $("tr-status").dataset.source = r.source;
    const bySource = new Map(), byHub = new Map(), atEnd = [];
    for (const p of r.problems) {
      const map = p.where === "source" ? bySource : byHub;
      if (p.event < 0) atEnd.push(p);
      else map.set(p.event, [...(map.get(p.event) || []), p]);
    }
    const problems = $("tr-problems");
    if (!r.problems.length) problems.append(el("li", { class: "fine", text: `✓ no problems: valid ${r.source}, valid hub stream` }));
    for (const p of r.problems) {
      const where = p.event < 0 ? "end of stream" : `${p.where === "source" ? "source event" : "hub event"} ${p.event}`;
      const item = el("li", { class: "problem", "data-rule": p.rule }, `${where}: ${p.rule}: ${p.message}`);
      if (p.event >= 0) {
        item.append(" ");
        const link = el("a", { href: "#", text: "show" });
        link.addEventListener("click", (e) => {
          e.preventDefault();
          const target = $(`${p.where === "source" ? "tr-frame" : "tr-event"}-${p.event}`);
          if (target) { target.scrollIntoView({ block: "center" }); target.focus(); }
        });
        item.append(link);
      }
      problems.append(item);
    }
    const frames = $("tr-frames");
    for (const f of r.frames) {
      const item = el("li", { id: `tr-frame-${f.n}`, tabindex: "-1" },
        el("span", { class: "name", text: f.event === "message" ? "" : `${f.event} ` }), f.data + (f.cut ? " …" : ""));
      this.mark(item, bySource.get(f.n));
      frames.append(item);
    }
    $("tr-frames-count").textContent = r.frames_total > r.frames.length
      ? `(${r.frames.length} of ${r.frames_total} shown)` : `(${r.frames_total})`;
    const events = $("tr-events");
    for (const [n, e] of r.events.entries()) {
      const { event, ...rest } = e;
      const item = el("li", { id: `tr-event-${n}`, tabindex: "-1" }, el("span", { class: "name", text: `${event} ` }), JSON.stringify(rest));
      this.mark(item, byHub.get(n));
      events.append(item);
    }
    $("tr-events-count").textContent = r.events_total > r.events.length
      ? `(${r.events.length} of ${r.events_total} shown)` : `(${r.events_total})`;
    for (const p of atEnd) {
      const list = p.where === "source" ? frames : events;
      const item = el("li", { class: "bad", value: -1 }, "(end of stream)");
      this.mark(item, [p]);
      list.append(item);
    }
    this.output = r.output;
    this.outputType = r.output_type;
    this.target = r.target;
    $("tr-target").textContent = `(${r.target}, ${fmtBytes(new Blob([r.output]).size)})`;
    $("tr-output").textContent = r.output.length > SHOWN_OUTPUT
      ? `${r.output.slice(0, SHOWN_OUTPUT)}\n… (${r.output.length - SHOWN_OUTPUT} more characters: Download has them all)`
      : r.output;
    $("tr-download").disabled = $("tr-copy").disabled = !r.output;
  },

  mark(item, problems) {
    if (!problems) return;
    item.classList.add("bad");
    item.dataset.test = "translator-problem-event";
    for (const p of problems) item.append(el("span", { class: "why", text: `${p.rule}: ${p.message}` }));
  },

  download() {
    const blob = new Blob([this.output], { type: this.outputType });
    const url = URL.createObjectURL(blob);
    const ext = this.outputType.includes("json") ? "json" : "sse";
    const a = el("a", { href: url, download: `translated.${this.target}.${ext}` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  },
};

// ------------------------------------------------------------------------------- traffic

const Traffic = {
  timer: null,
  last: 0,
  rows: new Map(),
  selected: null,

  start() {
    if (this.timer) return;
    const note = INFO.traffic.size
      ? `the last ${INFO.traffic.size} requests, in memory; ${INFO.traffic.prompts ? "prompt text kept (recording is on)" : "no prompt text (kept only when recording, [gateway] record_dir)"}`
      : "traffic is off ([gateway] ui_traffic = 0)";
    $("tf-note").textContent = note;
    this.poll();
    this.timer = setInterval(() => this.poll(), 2000);
  },

  stop() {
    clearInterval(this.timer);
    this.timer = null;
  },

  async poll() {
    let data;
    try {
      data = await api(`/traffic`);
      show($("tf-error"), "");
    } catch (err) {
      show($("tf-error"), err.message);
      return;
    }
    const body = $("tf-rows");
    const fresh = [];
    for (const e of data.entries) {
      const old = this.rows.get(e.id);
      const row = this.row(e);
      if (old) old.replaceWith(row);
      else fresh.push(row);
      this.rows.set(e.id, row);
    }
    if (fresh.length) {
      body.querySelector("tr.empty")?.remove();
      body.prepend(...fresh);
    }
    for (const [id, row] of this.rows) {
      if (!data.entries.some((e) => e.id === id)) { row.remove(); this.rows.delete(id); }
    }
    this.totals(data.totals);
    this.deployments(data.deployments || []);
    if (this.selected !== null && data.entries.some((e) => e.id === this.selected && e.status === "open")) this.detail(this.selected);
  },

  row(e) {
    const status = e.status === "error" && e.error ? `error ${e.error.status ?? ""} ${e.error.type}` : e.status;
    const tokens = e.input_tokens === null && e.output_tokens === null ? "–" : `${e.input_tokens ?? "?"} / ${e.output_tokens ?? "?"}`;
    const dialects = e.dialect === "console" ? `${e.upstream_format} → all six (console)` : `${e.upstream_format} → ${e.dialect}${e.relay ? " (relayed)" : ""}`;
    const row = el("tr", { "data-test": "traffic-row", "data-id": String(e.id), tabindex: "0", "aria-label": `request ${e.id}` },
      el("td", { text: String(e.id) }),
      el("td", { text: new Date(e.time * 1000).toLocaleTimeString() }),
      el("td", { text: e.model ?? "–", title: e.prompt ? `prompt: ${e.prompt}` : "" }),
      el("td", { text: e.upstream }),
      el("td", { text: dialects }),
      el("td", { class: `status-${e.status}`, text: status, title: e.error ? e.error.message : "" }),
      el("td", { text: fmtMs(e.ttft_ms) }),
      el("td", { text: tokens }),
      el("td", { text: e.tokens_per_s ?? "–" }),
      el("td", { text: fmtMs(e.duration_ms) }),
      el("td", { text: String(e.events) }));
    if (e.id === this.selected) row.classList.add("selected");
    const open = () => this.detail(e.id);
    row.addEventListener("click", open);
    row.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); open(); } });
    return row;
  },

  deployments(rows) {  // routing state per deployment (docs/gateway.md, "Routing across deployments")
    $("tf-deployments").replaceChildren(...rows.map((d) => el("tr", { "data-test": "deployment-row" },
      el("td", { text: d.model_name }),
      el("td", { text: d.deployment + (d.fallback ? " (fallback)" : "") }),
      el("td", { class: d.state === "ok" ? "status-ok" : "status-error",
                 text: d.state + (d.cooling_for_s ? ` ${Math.ceil(d.cooling_for_s)} s` : "") }),
      el("td", { text: String(d.in_flight) }),
      el("td", { text: fmtMs(d.latency_ewma_ms) }),
      el("td", { text: String(d.failures) }),
      el("td", { text: String(d.requests) }),
      el("td", { text: String(d.errors) }))));
  },

  totals(rows) {
    const box = $("tf-totals");
    box.replaceChildren();
    if (!rows.length) { box.append(el("p", { class: "muted", text: "No requests yet." })); return; }
    const max = Math.max(1, ...rows.map((r) => r.input_tokens + r.output_tokens));
    for (const r of rows) {
      const total = r.input_tokens + r.output_tokens;
      const bar = el("div", { class: "bar", title: `${r.input_tokens} in, ${r.output_tokens} out` });
      bar.style.width = `${(100 * total) / max}%`;
      box.append(el("div", { class: "bar-row" },
        el("span", { text: `${r.model ?? "?"} @ ${r.upstream}` }), el("div", {}, bar),
        el("span", { class: "muted small", text: `${total} tok, ${r.requests} req` })));
    }
  },

  async detail(id) {
    this.selected = id;
    for (const [rid, row] of this.rows) row.classList.toggle("selected", rid === id);
    const box = $("tf-detail");
    let d;
    try {
      d = await api(`/traffic/${id}`);
    } catch (err) {
      box.replaceChildren(el("h2", { text: "Timeline" }), el("p", { class: "message error", text: err.message }));
      return;
    }
    const kv = el("dl", { class: "kv" });
    const add = (k, v) => kv.append(el("dt", { text: k }), el("dd", { text: v }));
    add("request", `#${d.id} ${d.model ?? ""} via ${d.upstream} (${d.upstream_format} → ${d.dialect})`);
    add("status", d.error ? `${d.status}: ${d.error.type}${d.error.status ? " " + d.error.status : ""}: ${d.error.message}` : d.status);
    add("TTFT / duration", `${fmtMs(d.ttft_ms)} / ${fmtMs(d.duration_ms)}`);
    add("tokens", `${d.input_tokens ?? "?"} in, ${d.output_tokens ?? "?"} out${d.tokens_per_s ? `, ${d.tokens_per_s} tok/s` : ""}`);
    add("finish", d.finish ?? "–");
    add("upstream bytes / events", `${fmtBytes(d.bytes)} / ${d.events}`);
    if (d.prompt) add("prompt", d.prompt);
    const span = Math.max(1, d.duration_ms ?? 0, ...d.timeline.map((x) => x.t_ms));
    const list = el("ol", { class: "timeline", "aria-label": "event timeline" });
    for (const x of d.timeline) {
      const bar = el("div", { class: "bar" });
      bar.style.width = `${Math.max(0.3, (100 * x.t_ms) / span)}%`;
      list.append(el("li", {}, el("span", { class: "t", text: `+${x.t_ms.toFixed(1)} ms` }), el("div", {}, bar),
        el("span", { class: "small", text: x.bytes ? `${x.what} (${x.bytes} B)` : x.what })));
    }
    if (d.timeline_dropped) list.append(el("li", { class: "muted", text: `… ${d.timeline_dropped} more batches not kept` }));
    box.replaceChildren(el("h2", { text: `Timeline of request #${d.id}` }), kv, list);
  },
};

// ---------------------------------------------------------------------------------- boot

async function boot() {
  try {
    INFO = await api("/info");
  } catch (err) {
    show($("fatal"), `The console cannot start: ${err.message}`);
    return;
  }
  $("version").textContent = `llmbridge ${INFO.version}`;
  Playground.setup();
  Translator.setup();
  setupTabs();
  document.body.dataset.ready = "true";
}

boot();
