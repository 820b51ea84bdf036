// acp-relay dev console: one WebSocket to the relay with the ticket this page was served
// with (single use: reload the page for another), a few ACP requests at the click of a
// button, and every line both ways with its time and direction.
"use strict";

(() => {
  const MAX_ROWS = 5000; // oldest rows go first: a flooding agent must not eat the tab
  const PREVIEW_CHARS = 400;

  const $ = (id) => document.getElementById(id);
  const body = document.body;
  const statusEl = $("status");
  const logEl = $("log");
  const agentTextEl = $("agent-text");
  const cwdEl = $("cwd");
  const sessionEl = $("session-id");
  const promptEl = $("prompt");
  const rawEl = $("raw");
  const sendButtons = ["send-initialize", "send-new", "send-prompt", "send-cancel", "send-raw"]
    .map((id) => $(id));

  const pending = new Map(); // request id -> method, to name the replies
  let nextId = 1;
  let ws = null;
  let agentSpan = null; // where streamed agent text goes

  cwdEl.value = body.dataset.cwd || "/";

  function clock() {
    const d = new Date();
    const two = (n) => String(n).padStart(2, "0");
    return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.` +
      String(d.getMilliseconds()).padStart(3, "0");
  }

  // https://www.rfc-editor.org/rfc/rfc6455#section-7.4.1, and what the relay means by them
  const CLOSE_NAMES = {
    1000: "normal", 1001: "going away: the relay is shutting down", 1006: "abnormal",
    1007: "invalid UTF-8", 1008: "policy violation", 1009: "message too big",
    1011: "agent gone or relay error",
  };

  function setStatus(kind, text) {
    statusEl.className = `status ${kind}`;
    statusEl.textContent = text;
  }

  function parse(line) {
    try {
      return JSON.parse(line);
    } catch {
      return undefined;
    }
  }

  function summarize(message, direction) {
    if (message === undefined || message === null || typeof message !== "object") {
      return "(not a JSON object)";
    }
    if (typeof message.method === "string") {
      let text = message.method;
      if ("id" in message) {
        text += ` #${message.id}`;
        if (direction === "to_agent") pending.set(message.id, message.method);
      }
      const update = message.params && message.params.update;
      if (message.method === "session/update" && update && update.sessionUpdate) {
        text = update.sessionUpdate; // the method is in the raw line; the kind says more
        const content = update.content;
        if (content && content.type === "text") text += ` ${JSON.stringify(content.text)}`;
      }
      return text;
    }
    if ("id" in message) {
      const method = pending.get(message.id);
      const of = method ? ` (${method})` : "";
      if (message.error) return `error #${message.id}${of}: ${message.error.message || ""}`;
      return `result #${message.id}${of}`;
    }
    return "(no method, no id)";
  }

  function addRow(direction, label, summary, line, extraClass) {
    const row = document.createElement("li");
    row.className = `${direction}${extraClass ? " " + extraClass : ""}`;
    row.dataset.dir = direction;
    const time = document.createElement("time");
    time.textContent = clock();
    const dir = document.createElement("span");
    dir.className = "dir";
    dir.textContent = label;
    const sum = document.createElement("span");
    sum.className = "summary";
    sum.textContent = summary;
    const raw = document.createElement("code");
    raw.className = "raw";
    raw.textContent = line.length > PREVIEW_CHARS ? line.slice(0, PREVIEW_CHARS) + "…" : line;
    row.append(time, dir, sum, raw);
    row.dataset.line = line;
    logEl.append(row);
    while (logEl.childElementCount > MAX_ROWS) logEl.firstElementChild.remove();
    row.scrollIntoView({ block: "nearest" });
    return row;
  }

  function addLine(direction, line) {
    const message = parse(line);
    const label = direction === "to_agent" ? "client → agent" : "agent → client";
    addRow(direction, label, summarize(message, direction), line);
    return message;
  }

  function addEvent(text) {
    addRow("event", "socket", text, "", "event");
  }

  logEl.addEventListener("click", (event) => {
    const row = event.target.closest("li");
    if (!row || row.classList.contains("event") || event.target.closest("pre")) return;
    const open = row.querySelector("pre");
    if (open) {
      open.remove();
      return;
    }
    const message = parse(row.dataset.line);
    const pre = document.createElement("pre");
    pre.textContent = message === undefined ? row.dataset.line : JSON.stringify(message, null, 2);
    row.append(pre);
  });

  // -- streamed agent text ----------------------------------------------------------

  function startTurn(text) {
    const you = document.createElement("div");
    you.className = "you";
    you.textContent = text;
    agentSpan = null;
    agentTextEl.append(you);
  }

  function agentText(kind, text) {
    if (!agentSpan || agentSpan.dataset.kind !== kind) {
      agentSpan = document.createElement("div");
      agentSpan.className = kind === "agent_thought_chunk" ? "agent thought" : "agent";
      agentSpan.dataset.kind = kind;
      agentTextEl.append(agentSpan);
    }
    agentSpan.textContent += text;
    agentTextEl.scrollTop = agentTextEl.scrollHeight;
  }

  function onAgentMessage(message) {
    if (!message || typeof message !== "object") return;
    const update = message.method === "session/update" && message.params && message.params.update;
    if (update && (update.sessionUpdate === "agent_message_chunk" ||
        update.sessionUpdate === "agent_thought_chunk")) {
      const content = update.content;
      if (content && content.type === "text") agentText(update.sessionUpdate, content.text);
      return;
    }
    if ("id" in message && pending.get(message.id) === "session/new" && message.result &&
        typeof message.result.sessionId === "string") {
      sessionEl.value = message.result.sessionId;
    }
    if ("id" in message && pending.get(message.id) === "session/prompt" && message.result) {
      agentSpan = null;
    }
  }

  // -- sending ----------------------------------------------------------------------

  function send(line) {
    if (!ws || ws.readyState !== WebSocket.OPEN) return;
    ws.send(line);
    addLine("to_agent", line);
  }

  function request(method, params) {
    const id = nextId++;
    send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    return id;
  }

  $("send-initialize").addEventListener("click", () => request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "acp-relay-dev-console", version: body.dataset.version || "" },
  }));
  $("send-new").addEventListener("click", () => request("session/new", {
    cwd: cwdEl.value, mcpServers: [],
  }));
  $("send-prompt").addEventListener("click", () => {
    startTurn(promptEl.value);
    request("session/prompt", {
      sessionId: sessionEl.value, prompt: [{ type: "text", text: promptEl.value }],
    });
  });
  $("send-cancel").addEventListener("click", () => send(JSON.stringify({
    jsonrpc: "2.0", method: "session/cancel", params: { sessionId: sessionEl.value },
  })));
  $("send-raw").addEventListener("click", () => {
    if (rawEl.value.trim()) send(rawEl.value);
  });
  $("reload").addEventListener("click", () => location.reload());

  // -- the socket -------------------------------------------------------------------

  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${location.host}${body.dataset.path}` +
      `?ticket=${encodeURIComponent(body.dataset.ticket)}`;
    body.removeAttribute("data-ticket"); // single use: nothing left to copy from the DOM
    ws = new WebSocket(url);
    ws.addEventListener("open", () => {
      setStatus("open", `open: ${body.dataset.path}`);
      addEvent("open");
      sendButtons.forEach((b) => { b.disabled = false; });
    });
    ws.addEventListener("message", (event) => {
      if (typeof event.data !== "string") {
        addEvent("binary frame ignored");
        return;
      }
      onAgentMessage(addLine("to_client", event.data));
    });
    ws.addEventListener("close", (event) => {
      let why = event.reason || CLOSE_NAMES[event.code] || "";
      if (event.code === 1006) {
        why = "abnormal, no close frame: the connection failed or dropped (a refused " +
          "ticket or origin never reaches the page: the relay's log says why)";
      }
      const text = `closed: ${event.code}${why ? ` (${why})` : ""}`;
      setStatus("closed", text);
      addEvent(text);
      sendButtons.forEach((b) => { b.disabled = true; });
      $("reload").hidden = false;
    });
  }

  connect();
})();
