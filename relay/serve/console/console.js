// acp-relay dev console: one connection to the agent through the relay's resuming module
// (/acp-relay-resume.js), a few ACP requests at the click of a button, the agent's
// permission requests as buttons, and every line both ways with its time and direction.
//
// The page's first socket uses the ticket it was served with; each later one (a resume
// after the network dropped) gets a fresh ticket from /console-ticket, which needs the
// console token of the page's address. The status line says what the connection is doing:
// open, "connection lost, resuming…", "resumed after 2.1 s, 37 messages replayed", or why
// it could not resume.
import { resumingWebSocket } from "/acp-relay-resume.js";

const MAX_ROWS = 5000; // oldest rows go first: a flooding agent must not eat the tab
const PREVIEW_CHARS = 400;
const TICKET_PATH = "/console-ticket";
const TOKEN_HEADER = "Acp-Console-Token";
const METHOD_NOT_FOUND = -32601;

const $ = (id) => document.getElementById(id);
const body = document.body;
const statusEl = $("status");
const logEl = $("log");
const agentTextEl = $("agent-text");
const asksEl = $("asks");
const asksListEl = $("asks-list");
const cwdEl = $("cwd");
const sessionEl = $("session-id");
const promptEl = $("prompt");
const rawEl = $("raw");
const sendButtons = ["send-initialize", "send-new", "send-prompt", "send-cancel", "send-raw"]
  .map((id) => $(id));

// single use: nothing left to copy from the DOM once read
const token = body.dataset.token || "";
let firstTicket = body.dataset.ticket || "";
body.removeAttribute("data-ticket");
body.removeAttribute("data-token");

const pending = new Map(); // id of a request to the agent -> its method, to name the replies
const asked = new Map(); // id of a request from the agent -> its method, to name our answers
let nextId = 1;
let ws = null;
let agentSpan = null; // where streamed agent text goes
let failure = ""; // why the connection could not be resumed

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
  4404: "the relay no longer has the connection",
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

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function summarize(message, direction) {
  if (!isObject(message)) return "(not a JSON object)";
  if (typeof message.method === "string") {
    let text = message.method;
    if ("id" in message) {
      text += ` #${message.id}`;
      (direction === "to_agent" ? pending : asked).set(message.id, message.method);
    }
    const update = isObject(message.params) && message.params.update;
    if (message.method === "session/update" && update && update.sessionUpdate) {
      text = update.sessionUpdate; // the method is in the raw line; the kind says more
      const content = update.content;
      if (content && content.type === "text") text += ` ${JSON.stringify(content.text)}`;
    }
    return text;
  }
  if ("id" in message) {
    const method = (direction === "to_agent" ? asked : pending).get(message.id);
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

// -- what the agent asks ------------------------------------------------------------

/** session/request_permission: the tool call's title and kind, a button per option. */
function askPermission(message) {
  const params = isObject(message.params) ? message.params : {};
  const toolCall = isObject(params.toolCall) ? params.toolCall : {};
  const options = Array.isArray(params.options) ? params.options.filter(isObject) : [];
  const ask = document.createElement("div");
  ask.className = "ask";
  ask.dataset.id = JSON.stringify(message.id);
  ask.dataset.session = typeof params.sessionId === "string" ? params.sessionId : "";
  const title = document.createElement("p");
  title.className = "ask-title";
  const name = document.createElement("span");
  name.className = "tool-title";
  name.textContent = typeof toolCall.title === "string" ? toolCall.title : "(a tool call)";
  const kind = document.createElement("span");
  kind.className = "tool-kind";
  kind.textContent = typeof toolCall.kind === "string" ? toolCall.kind : "other";
  title.append(name, " ", kind);
  const buttons = document.createElement("div");
  buttons.className = "ask-options";
  for (const option of options) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = `option ${option.kind || ""}`;
    button.dataset.optionId = String(option.optionId);
    button.textContent = String(option.name ?? option.optionId);
    button.title = String(option.kind ?? "");
    button.addEventListener("click", () => {
      answerPermission(ask, message.id, { outcome: "selected", optionId: option.optionId });
    });
    buttons.append(button);
  }
  ask.append(title, buttons);
  asksListEl.append(ask);
  asksEl.hidden = false;
}

function answerPermission(ask, id, outcome) {
  ask.remove();
  asksEl.hidden = asksListEl.childElementCount === 0;
  send(JSON.stringify({ jsonrpc: "2.0", id, result: { outcome } }));
}

/** After session/cancel the pending permission requests of that session are answered
 * "cancelled", as ACP asks of a client. */
function cancelAsks(sessionId) {
  for (const ask of [...asksListEl.children]) {
    if (ask.dataset.session === sessionId) {
      answerPermission(ask, JSON.parse(ask.dataset.id), { outcome: "cancelled" });
    }
  }
}

/** Any other request gets -32601 at once: the console declares no fs or terminal capability. */
function refuseRequest(message) {
  send(JSON.stringify({
    jsonrpc: "2.0",
    id: message.id,
    error: {
      code: METHOD_NOT_FOUND,
      message: "Method not found",
      data: {
        method: message.method,
        why: "the acp-relay dev console answers session/request_permission only; it " +
          "declares no fs or terminal capability",
      },
    },
  }));
}

function onAgentMessage(message) {
  if (!isObject(message)) return;
  if (typeof message.method === "string" && "id" in message) {
    if (message.method === "session/request_permission") askPermission(message);
    else refuseRequest(message);
    return;
  }
  const update = message.method === "session/update" && isObject(message.params) &&
    message.params.update;
  if (update && (update.sessionUpdate === "agent_message_chunk" ||
      update.sessionUpdate === "agent_thought_chunk")) {
    const content = update.content;
    if (content && content.type === "text") agentText(update.sessionUpdate, content.text);
    return;
  }
  if ("id" in message && pending.get(message.id) === "session/new" && isObject(message.result) &&
      typeof message.result.sessionId === "string") {
    sessionEl.value = message.result.sessionId;
  }
  if ("id" in message && pending.get(message.id) === "session/prompt" && message.result) {
    agentSpan = null;
  }
}

// -- sending ----------------------------------------------------------------------

function send(line) {
  if (!ws || ws.readyState !== ws.OPEN) return;
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
$("send-cancel").addEventListener("click", () => {
  send(JSON.stringify({
    jsonrpc: "2.0", method: "session/cancel", params: { sessionId: sessionEl.value },
  }));
  cancelAsks(sessionEl.value);
});
$("send-raw").addEventListener("click", () => {
  if (rawEl.value.trim()) send(rawEl.value);
});
$("reload").addEventListener("click", () => location.reload());

// -- the connection ---------------------------------------------------------------

/** The page's ticket for its first socket, then a fresh one from the relay for each resume. */
async function ticket() {
  if (firstTicket) {
    const first = firstTicket;
    firstTicket = "";
    return first;
  }
  const reply = await fetch(TICKET_PATH, { headers: { [TOKEN_HEADER]: token }, cache: "no-store" });
  const text = (await reply.text()).trim();
  if (!reply.ok) throw new Error(`${TICKET_PATH} answered ${reply.status}: ${text}`);
  return text;
}

function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

function resumedText({ seconds, replayed, resent }) {
  let text = `resumed after ${seconds.toFixed(1)} s, ${plural(replayed, "message")} replayed`;
  if (resent) text += `, ${plural(resent, "message")} of ours sent again`;
  return text;
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ResumingWebSocket = resumingWebSocket({ ticket });
  ws = new ResumingWebSocket(`${scheme}//${location.host}${body.dataset.path}`);
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
  ws.addEventListener("resuming", (event) => {
    setStatus("resuming", "connection lost, resuming…");
    addEvent(`connection lost (${event.detail.reason}), resuming within ` +
      `${event.detail.grace} s`);
  });
  ws.addEventListener("resumed", (event) => {
    const text = resumedText(event.detail);
    setStatus("open resumed", text);
    addEvent(text);
  });
  ws.addEventListener("failed", (event) => {
    failure = `could not resume: ${event.detail.reason}`;
    addEvent(failure);
  });
  ws.addEventListener("close", (event) => {
    let why = event.reason || CLOSE_NAMES[event.code] || "";
    if (event.code === 1006 && !failure) {
      why = "abnormal, no close frame: the connection failed or dropped (a refused " +
        "ticket or origin never reaches the page: the relay's log says why)";
    }
    const text = failure || `closed: ${event.code}${why ? ` (${why})` : ""}`;
    setStatus("closed", text);
    addEvent(`closed: ${event.code}${why ? ` (${why})` : ""}`);
    sendButtons.forEach((b) => { b.disabled = true; });
    $("reload").hidden = false;
  });
}

connect();
