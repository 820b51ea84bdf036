// acp-relay dev console: one connection to the agent through the relay's resuming module
// (/acp-relay-resume.js), a few ACP requests at the click of a button, the agent's
// permission requests as buttons, and every line both ways with its time and direction
// (shown by /conversation.js). "share" gives the address of a watch view of this
// connection (/watch.js); "What the relay changed" shows what the filesystem boundary did
// on it, read from the relay out of band (/console-boundary), not from the conversation.
//
// The page's first socket uses the ticket it was served with; each later one (a resume
// after the network dropped) gets a fresh ticket from /console-ticket, which needs the
// console token of the page's address. The status line says what the connection is doing:
// open, "connection lost, resuming…", "resumed after 2.1 s, 37 messages replayed", or why
// it could not resume.
import { resumingWebSocket } from "/acp-relay-resume.js";
import {
  ANSWERED, Conversation, PERMISSION, answererText, closeText, isObject, normalClose,
  outcomeText, permissionAsk,
} from "/conversation.js";

const TICKET_PATH = "/console-ticket";
const BOUNDARY_PATH = "/console-boundary";
const TOKEN_HEADER = "Acp-Console-Token";
const METHOD_NOT_FOUND = -32601;
const BOUNDARY_SOON_MS = 200; // after a line crossed: what the boundary did, asked once
const BOUNDARY_EVERY_MS = 5000; // ... and this often while open (the relay's own answers
// to the agent never reach the page)

const $ = (id) => document.getElementById(id);
const body = document.body;
const statusEl = $("status");
const asksEl = $("asks");
const asksListEl = $("asks-list");
const cwdEl = $("cwd");
const sessionEl = $("session-id");
const promptEl = $("prompt");
const rawEl = $("raw");
const sendButtons = ["send-initialize", "send-new", "send-prompt", "send-cancel", "send-raw"]
  .map((id) => $(id));
const conversation = new Conversation($("log"), $("agent-text"));

// single use: nothing left to copy from the DOM once read
const token = body.dataset.token || "";
let firstTicket = body.dataset.ticket || "";
body.removeAttribute("data-ticket");
body.removeAttribute("data-token");

let nextId = 1;
let ws = null;
let failure = ""; // why the connection could not be resumed

cwdEl.value = body.dataset.cwd || "/";

function setStatus(kind, text) {
  statusEl.className = `status ${kind}`;
  statusEl.textContent = text;
}

// -- what the agent asks ------------------------------------------------------------

function askPermission(message) {
  const ask = permissionAsk(message, (optionId) => {
    answerPermission(ask, message.id, { outcome: "selected", optionId });
  });
  asksListEl.append(ask);
  asksEl.hidden = false;
}

function closeAsk(ask) {
  ask.remove();
  asksEl.hidden = asksListEl.childElementCount === 0;
}

function answerPermission(ask, id, outcome) {
  closeAsk(ask);
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

/** _acp-relay/answered (sent while watchers are attached): a request a watcher answered
 * closes its dialog here, and the transcript says who chose what. */
function answered(params) {
  if (params.by !== "watcher") return; // our own answer: its dialog is closed already
  const key = JSON.stringify(params.id);
  const ask = [...asksListEl.children].find((el) => el.dataset.id === key);
  const title = ask?.querySelector(".tool-title")?.textContent;
  if (ask) closeAsk(ask);
  const what = title ? `permission request #${params.id} (${title})` :
    `permission request #${params.id}`;
  conversation.note(`${what} answered by ${answererText(params.by, params.subject)}: ` +
    outcomeText(params), "note answered");
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
    if (message.method === PERMISSION) askPermission(message);
    else refuseRequest(message);
    return;
  }
  if (message.method === ANSWERED && isObject(message.params)) {
    answered(message.params);
    return;
  }
  if ("id" in message && conversation.pending.get(message.id) === "session/new" &&
      isObject(message.result) && typeof message.result.sessionId === "string") {
    sessionEl.value = message.result.sessionId;
  }
  conversation.show("to_client", message);
}

// -- sending ----------------------------------------------------------------------

function send(line) {
  if (!ws || ws.readyState !== ws.OPEN) return;
  ws.send(line);
  conversation.show("to_agent", conversation.line("to_agent", line));
  boundarySoon();
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
$("send-prompt").addEventListener("click", () => request("session/prompt", {
  sessionId: sessionEl.value, prompt: [{ type: "text", text: promptEl.value }],
}));
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

// -- share: a watch view of this connection ----------------------------------------

/** The addresses of this connection's watch view, once the relay's welcome named it; or
 * why there are none. */
function offerShare() {
  const hint = $("share-hint");
  const id = ws.connection;
  let why = "";
  if (body.dataset.sharing !== "on") {
    why = "sharing is off: the relay runs with --max-watchers 0";
  } else if (!id) {
    why = "sharing needs the resume profile (the page learns its connection's id from the " +
      "relay's welcome): the relay runs with --resume-grace 0";
  }
  for (const row of document.querySelectorAll(".share .control")) row.hidden = Boolean(why);
  $("share").disabled = false;
  if (why) {
    hint.textContent = why;
    return;
  }
  const base = `${location.origin}/?token=${encodeURIComponent(token)}` +
    `&watch=${encodeURIComponent(id)}`;
  for (const [name, href] of [["watch", base], ["answer", `${base}&answer=1`]]) {
    $(`share-${name}`).href = href;
    $(`share-${name}-url`).value = href;
  }
  hint.textContent = `connection ${id}; each address holds the console's token: give it ` +
    "only to whom you would give the console";
}

$("share").addEventListener("click", () => {
  const links = $("share-links");
  links.hidden = !links.hidden;
});
for (const input of document.querySelectorAll(".share-url")) {
  input.addEventListener("focus", () => input.select());
}

// -- what the filesystem boundary did, read from the relay --------------------------

let boundaryTimer = undefined;
let boundaryEvery = undefined;
let boundaryShown = 0; // the number of the last record shown
let boundaryAsking = false;

function boundarySoon() {
  if (boundaryTimer !== undefined || !ws?.connection) return;
  boundaryTimer = setTimeout(() => {
    boundaryTimer = undefined;
    askBoundary();
  }, BOUNDARY_SOON_MS);
}

async function askBoundary() {
  const id = ws?.connection;
  if (!id || boundaryAsking || ws.readyState !== ws.OPEN) return; // once closed, it is gone
  boundaryAsking = true;
  try {
    const reply = await fetch(`${BOUNDARY_PATH}?connection=${encodeURIComponent(id)}`, {
      headers: { [TOKEN_HEADER]: token }, cache: "no-store",
    });
    if (reply.ok) showBoundary(await reply.json());
  } catch {
    // the relay is gone or the network dropped: the socket's events say so
  } finally {
    boundaryAsking = false;
  }
}

function boundaryText(record) {
  const via = `${record.method}`;
  if (record.kind === "withheld") {
    return `${via}: withheld the editor's ${record.capabilities.join(", ")} (--files box: ` +
      "the agent uses the box's own files and terminal)";
  }
  if (record.kind === "answered") return `${via}: ${record.reason}`;
  return `${via} ${record.field}: ${record.from} → ${record.to}`;
}

function showBoundary(report) {
  const list = $("boundary-list");
  const fresh = (report.records || []).filter((r) => r.n > boundaryShown);
  for (const record of fresh) {
    const item = document.createElement("li");
    item.className = `crossing ${record.kind}`;
    item.dataset.kind = record.kind;
    item.dataset.dir = record.direction;
    const dir = document.createElement("span");
    dir.className = "dir";
    dir.textContent = record.direction === "to_agent" ? "client → agent" : "agent → client";
    const what = document.createElement("span");
    what.className = "what";
    what.textContent = boundaryText(record);
    item.append(dir, what);
    list.append(item);
    boundaryShown = record.n;
  }
  $("boundary-none").hidden = boundaryShown > 0;
  const dropped = $("boundary-dropped");
  dropped.hidden = !report.dropped;
  dropped.textContent = `${report.dropped} older records no longer kept`;
}

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
    // The whole id: what `acp-relay ticket --watch` takes, as the relay's log shows it.
    conversation.event(ws.connection ? `open: connection ${ws.connection}` : "open");
    sendButtons.forEach((b) => { b.disabled = false; });
    offerShare();
    if (ws.connection) boundaryEvery = setInterval(askBoundary, BOUNDARY_EVERY_MS);
  });
  ws.addEventListener("message", (event) => {
    if (typeof event.data !== "string") {
      conversation.event("binary frame ignored");
      return;
    }
    onAgentMessage(conversation.line("to_client", event.data));
    boundarySoon();
  });
  ws.addEventListener("resuming", (event) => {
    setStatus("resuming", "connection lost, resuming…");
    conversation.event(`connection lost (${event.detail.reason}), resuming within ` +
      `${event.detail.grace} s`, { problem: true });
  });
  ws.addEventListener("resumed", (event) => {
    const text = resumedText(event.detail);
    setStatus("open resumed", text);
    conversation.event(text);
  });
  ws.addEventListener("failed", (event) => {
    failure = `could not resume: ${event.detail.reason}`;
    conversation.event(failure, { problem: true });
  });
  ws.addEventListener("close", (event) => {
    clearInterval(boundaryEvery);
    clearTimeout(boundaryTimer);
    let why = event.reason;
    if (event.code === 1006 && !failure) {
      why = "abnormal, no close frame: the connection failed or dropped (a refused " +
        "ticket or origin never reaches the page: the relay's log says why)";
    }
    const text = closeText(event.code, why);
    setStatus("closed", failure || text);
    conversation.event(text, { problem: !normalClose(event.code) });
    sendButtons.forEach((b) => { b.disabled = true; });
    $("share").disabled = true;
    $("reload").hidden = false;
  });
}

connect();
