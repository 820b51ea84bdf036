// acp-relay dev console, the watch view: one connection's conversation, watched
// (docs/sharing.md). The page (the console's address with &watch=ID, and &answer=1 when it
// may answer) opens no connection of its own: it asks the relay for a watcher's ticket
// (/console-watch-ticket, with the console token of its address), connects with the
// acp-relay.watch.v1 subprotocol, and shows the conversation so far, then live: both
// directions, the agent's text joined, tool calls with their status, permission requests
// (with their options as buttons when this view may answer) and who answered them, the
// controller's detach and resume, and why the watch ended.
import {
  ANSWERED, CLOSE_NAMES, Conversation, DETACHED, PERMISSION, RESUMED, answererText, closeText,
  isObject, markAnswered, normalClose, outcomeText, parse, permissionAsk, remember,
} from "/conversation.js";

const WATCH_PROFILE = "acp-relay.watch.v1";
const TICKET_PREFIX = "acp-ticket.";
const WATCH_TICKET_PATH = "/console-watch-ticket";
const TOKEN_HEADER = "Acp-Console-Token";

const $ = (id) => document.getElementById(id);
const body = document.body;
const statusEl = $("status");
const conversation = new Conversation($("log"), $("agent-text"));

// nothing left to copy from the DOM once read
const token = body.dataset.token || "";
body.removeAttribute("data-token");
const connection = body.dataset.watch || "";
const wantsToAnswer = body.dataset.answer === "1";

let ws = null;
let mayAnswer = false;
const asks = new Map(); // JSON of a permission request's id -> its element

function setStatus(kind, text) {
  statusEl.className = `status ${kind}`;
  statusEl.textContent = text;
}

function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

// -- what the frames say ------------------------------------------------------------

/** The first frame: which connection, whether we may answer, how much history follows. */
function watching(first) {
  mayAnswer = first.mayAnswer === true;
  const role = mayAnswer ? "may answer permission requests" : "sees only";
  setStatus("open", `watching ${first.connection} (${role})`);
  const history = isObject(first.history) ? first.history : {};
  let text = `watching: ${plural(history.messages ?? 0, "line")} of history from line ` +
    `${history.first ?? 1}`;
  if (history.dropped) text += `; ${plural(history.dropped, "older line")} no longer kept`;
  conversation.event(text);
}

const LABELS = {
  client: ["to_agent", "client → agent"],
  watcher: ["to_agent", "watcher → agent"],
  agent: ["to_client", "agent → client"],
};

/** A line of the conversation, as the relay carried it. */
function said(header, line) {
  const [direction, label] = LABELS[header.from] ?? ["to_client", String(header.from)];
  const message = conversation.line(direction, line, { label, seq: header.seq });
  if (!isObject(message)) return;
  if (direction === "to_client" && message.method === PERMISSION && "id" in message) {
    ask(message);
  } else if (direction === "to_agent" && !("method" in message) && "id" in message) {
    const shown = asks.get(JSON.stringify(message.id));
    const by = header.from === "watcher" ? "watcher" : "controller";
    if (shown) markAnswered(shown, `answered by ${answererText(by)}: ${outcomeText(message)}`);
  }
  conversation.show(direction, message);
}

function ask(message) {
  const answer = mayAnswer ? (optionId) => {
    for (const button of shown.querySelectorAll("button")) button.disabled = true;
    ws.send(JSON.stringify({
      jsonrpc: "2.0", id: message.id, result: { outcome: { outcome: "selected", optionId } },
    }));
  } : undefined;
  const shown = permissionAsk(message, answer);
  remember(asks, JSON.stringify(message.id), shown);
  conversation.place(shown);
}

/** A message of the relay's own: an answer taken, the controller gone or back, a refusal. */
function told(line) {
  const message = conversation.line("relay", line, { label: "relay", extraClass: "by-relay" });
  if (!isObject(message)) return;
  const params = isObject(message.params) ? message.params : {};
  if (message.method === ANSWERED) {
    const shown = asks.get(JSON.stringify(params.id));
    const text = `answered by ${answererText(params.by, params.subject)}: ${outcomeText(params)}`;
    if (shown) markAnswered(shown, text);
  } else if (message.method === DETACHED) {
    const text = `the controller's socket was lost (${params.reason ?? "no reason"}): the ` +
      `connection waits ${params.grace ?? "?"} s for it to resume`;
    setStatus("resuming", "the controller is away");
    conversation.event(text, { problem: true });
    conversation.note(text);
  } else if (message.method === RESUMED) {
    setStatus("open", `watching ${connection} (${mayAnswer ? "may answer" : "sees only"})`);
    conversation.event("the controller is back");
    conversation.note("the controller is back");
  } else if (isObject(message.error)) {
    const detail = isObject(message.error.data) ? message.error.data.detail ?? "" : "";
    conversation.event(`the relay refused our frame: ${message.error.message}` +
      (detail ? `: ${detail}` : ""), { problem: true });
  }
}

function frame(data) {
  if (typeof data !== "string") {
    conversation.event("binary frame ignored");
    return;
  }
  const newline = data.indexOf("\n");
  if (newline < 0) {
    const first = parse(data);
    if (isObject(first) && first.type === "watching") watching(first);
    else {
      conversation.event(`a frame this view does not know: ${data.slice(0, 200)}`,
        { problem: true });
    }
    return;
  }
  const header = parse(data.slice(0, newline));
  const line = data.slice(newline + 1);
  if (!isObject(header)) {
    conversation.event(`a frame without a header: ${data.slice(0, 200)}`, { problem: true });
  }
  else if (header.from === "relay") told(line);
  else said(header, line);
}

// -- the socket -----------------------------------------------------------------------

/** A watcher's ticket for the connection, minted by the relay for the console's token. */
async function watcherTicket() {
  const query = `connection=${encodeURIComponent(connection)}&answer=${wantsToAnswer ? 1 : 0}`;
  const reply = await fetch(`${WATCH_TICKET_PATH}?${query}`, {
    headers: { [TOKEN_HEADER]: token }, cache: "no-store",
  });
  const text = (await reply.text()).trim();
  if (!reply.ok) throw new Error(`${reply.status}: ${text}`);
  return text;
}

function ended(text) {
  setStatus("closed", text);
  $("again").hidden = false;
}

async function watch() {
  $("watched").textContent = `connection ${connection}` +
    (wantsToAnswer ? ", may answer permission requests" : ", sees only");
  let ticket;
  try {
    ticket = await watcherTicket();
  } catch (error) {
    const text = `could not watch: ${error.message}`;
    conversation.event(text, { problem: true });
    ended(text);
    return;
  }
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  setStatus("connecting", "connecting…");
  ws = new WebSocket(`${scheme}//${location.host}${body.dataset.path}`,
    [WATCH_PROFILE, TICKET_PREFIX + ticket]);
  ws.addEventListener("message", (event) => frame(event.data));
  ws.addEventListener("close", (event) => {
    let why = event.reason || CLOSE_NAMES[event.code] || "";
    if (event.code === 1006) {
      why = "abnormal, no close frame: the relay refused the watcher or the network " +
        "dropped (the relay's log says why)";
    }
    const text = closeText(event.code, why);
    conversation.event(text, { problem: !normalClose(event.code) });
    for (const shown of asks.values()) {
      for (const button of shown.querySelectorAll("button")) button.disabled = true;
    }
    ended(text);
  });
}

$("again").addEventListener("click", () => location.reload());
watch();
