// acp-relay dev console: how a conversation is shown, for the console (console.js) and
// its watch view (watch.js). Every line gets a row in the log (time, direction, a summary,
// the raw line; a click pretty-prints it); the transcript beside it joins the agent's
// streamed text after the prompt that caused it, shows tool calls with their status and
// the agent's permission requests, and says who answered them.

export const MAX_ROWS = 5000; // oldest rows go first: a flooding agent must not eat the tab
const PREVIEW_CHARS = 400;
export const ANSWERED = "_acp-relay/answered";
export const DETACHED = "_acp-relay/detached";
export const RESUMED = "_acp-relay/resumed";
export const PERMISSION = "session/request_permission";

// https://www.rfc-editor.org/rfc/rfc6455#section-7.4.1, and what the relay means by them
export const CLOSE_NAMES = {
  1000: "normal", 1001: "going away: the relay is shutting down", 1006: "abnormal",
  1007: "invalid UTF-8", 1008: "policy violation", 1009: "message too big",
  1011: "agent gone or relay error",
  4404: "the relay no longer has the connection",
  4429: "fell behind",
};

export function clock() {
  const d = new Date();
  const two = (n) => String(n).padStart(2, "0");
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.` +
    String(d.getMilliseconds()).padStart(3, "0");
}

export function parse(line) {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

export function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** Whether a close code ends a socket as expected: done (1000), or going away (1001). */
export function normalClose(code) {
  return code === 1000 || code === 1001;
}

export function closeText(code, reason) {
  const why = reason || CLOSE_NAMES[code] || "";
  return `closed: ${code}${why ? ` (${why})` : ""}`;
}

/** What an answer to a permission request chose: an option's id, "cancelled" or an error. */
export function outcomeText(answer) {
  if (isObject(answer.error)) {
    return `error ${answer.error.code ?? ""} ${answer.error.message ?? ""}`.trim();
  }
  const outcome = isObject(answer.result) && isObject(answer.result.outcome)
    ? answer.result.outcome : {};
  if (outcome.outcome === "selected") return String(outcome.optionId);
  return String(outcome.outcome ?? "(no outcome)");
}

/** Who answered, as _acp-relay/answered says it: "the controller" or "a watcher (subject)". */
export function answererText(by, subject) {
  if (by === "watcher") return subject ? `a watcher (${subject})` : "a watcher";
  return "the controller";
}

function span(className, text) {
  const el = document.createElement("span");
  el.className = className;
  el.textContent = text;
  return el;
}

/** `map.set(key, value)`, the oldest entry forgotten past MAX_ROWS (its element is gone by
 * then: the transcript keeps as many). */
export function remember(map, key, value) {
  map.delete(key);
  map.set(key, value);
  if (map.size > MAX_ROWS) map.delete(map.keys().next().value);
}

/** A permission request: the tool call's title and kind, and a button per option when
 * `answer` is given (called with the option's id). */
export function permissionAsk(message, answer) {
  const params = isObject(message.params) ? message.params : {};
  const toolCall = isObject(params.toolCall) ? params.toolCall : {};
  const options = Array.isArray(params.options) ? params.options.filter(isObject) : [];
  const ask = document.createElement("div");
  ask.className = "ask";
  ask.dataset.id = JSON.stringify(message.id);
  ask.dataset.session = typeof params.sessionId === "string" ? params.sessionId : "";
  const title = document.createElement("p");
  title.className = "ask-title";
  const name = typeof toolCall.title === "string" ? toolCall.title : "(a tool call)";
  const kind = typeof toolCall.kind === "string" ? toolCall.kind : "other";
  title.append(span("tool-title", name), " ", span("tool-kind", kind));
  ask.append(title);
  if (answer) {
    const buttons = document.createElement("div");
    buttons.className = "ask-options";
    for (const option of options) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = `option ${option.kind || ""}`;
      button.dataset.optionId = String(option.optionId);
      button.textContent = String(option.name ?? option.optionId);
      button.title = String(option.kind ?? "");
      button.addEventListener("click", () => answer(option.optionId));
      buttons.append(button);
    }
    ask.append(buttons);
  } else {
    const names = options.map((o) => String(o.name ?? o.optionId)).join(", ");
    ask.append(span("ask-waiting", `waiting for an answer (${names || "no options"})`));
  }
  return ask;
}

/** The request `ask` shows was answered: its buttons go, and it says who chose what. */
export function markAnswered(ask, text) {
  for (const el of ask.querySelectorAll(".ask-options, .ask-waiting")) el.remove();
  let said = ask.querySelector(".ask-answered");
  if (!said) {
    said = span("ask-answered", "");
    ask.append(said);
  }
  said.textContent = text;
  ask.classList.add("answered");
}

export class Conversation {
  /** `log`: the <ol> of rows; `transcript`: where prompts, agent text and tool calls go. */
  constructor(log, transcript) {
    this.log = log;
    this.transcript = transcript;
    this.pending = new Map(); // id of a request to the agent -> its method, to name replies
    this.asked = new Map(); // id of a request from the agent -> its method, to name answers
    this.tools = new Map(); // toolCallId -> its element in the transcript
    this.agentSpan = null; // where streamed agent text goes
    log.addEventListener("click", (event) => this.#fold(event));
  }

  // -- the log ------------------------------------------------------------------------

  summarize(message, direction) {
    if (!isObject(message)) return "(not a JSON object)";
    if (typeof message.method === "string") {
      let text = message.method;
      if ("id" in message) {
        text += ` #${message.id}`;
        (direction === "to_agent" ? this.pending : this.asked).set(message.id, message.method);
      }
      const params = isObject(message.params) ? message.params : {};
      const update = params.update;
      if (message.method === "session/update" && isObject(update) && update.sessionUpdate) {
        text = update.sessionUpdate; // the method is in the raw line; the kind says more
        const content = update.content;
        if (isObject(content) && content.type === "text") text += ` ${JSON.stringify(content.text)}`;
        if (typeof update.status === "string") text += ` ${update.status}`;
      }
      if (message.method === ANSWERED) {
        text += ` #${params.id} by ${answererText(params.by, params.subject)}: ` +
          outcomeText(params);
      }
      return text;
    }
    if ("id" in message) {
      const method = (direction === "to_agent" ? this.asked : this.pending).get(message.id);
      const of = method ? ` (${method})` : "";
      if (isObject(message.error)) return `error #${message.id}${of}: ${message.error.message || ""}`;
      return `result #${message.id}${of}`;
    }
    return "(no method, no id)";
  }

  row(direction, label, summary, line, { extraClass = "", seq } = {}) {
    const row = document.createElement("li");
    row.className = `${direction}${extraClass ? " " + extraClass : ""}`;
    row.dataset.dir = direction;
    const time = document.createElement("time");
    time.textContent = clock();
    if (seq !== undefined) {
      row.dataset.seq = String(seq);
      time.title = `line ${seq} of the conversation`;
    }
    const raw = document.createElement("code");
    raw.className = "raw";
    raw.textContent = line.length > PREVIEW_CHARS ? line.slice(0, PREVIEW_CHARS) + "…" : line;
    row.append(time, span("dir", label), span("summary", summary), raw);
    row.dataset.line = line;
    this.log.append(row);
    while (this.log.childElementCount > MAX_ROWS) this.log.firstElementChild.remove();
    row.scrollIntoView({ block: "nearest" });
    return row;
  }

  /** A line of the conversation: its row; the message, parsed. */
  line(direction, line, { label, seq, extraClass } = {}) {
    const message = parse(line);
    const shown = label ?? (direction === "to_agent" ? "client → agent" : "agent → client");
    this.row(direction, shown, this.summarize(message, direction), line, { seq, extraClass });
    return message;
  }

  /** A row of the socket's own: `problem` for what went wrong (red), otherwise plain. */
  event(text, { problem = false } = {}) {
    this.row("event", "socket", text, "", { extraClass: problem ? "event problem" : "event" });
  }

  #fold(event) {
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
  }

  // -- the transcript -----------------------------------------------------------------

  #append(el) {
    this.transcript.append(el);
    while (this.transcript.childElementCount > MAX_ROWS) {
      this.transcript.firstElementChild.remove();
    }
    this.transcript.scrollTop = this.transcript.scrollHeight;
    return el;
  }

  turn(text) {
    this.agentSpan = null;
    const you = document.createElement("div");
    you.className = "you";
    you.textContent = text;
    this.#append(you);
  }

  endTurn() {
    this.agentSpan = null;
  }

  note(text, className = "note") {
    this.agentSpan = null;
    const note = document.createElement("div");
    note.className = className;
    note.textContent = text;
    return this.#append(note);
  }

  place(el) {
    this.agentSpan = null;
    return this.#append(el);
  }

  agentText(kind, text) {
    if (!this.agentSpan || this.agentSpan.dataset.kind !== kind) {
      this.agentSpan = document.createElement("div");
      this.agentSpan.className = kind === "agent_thought_chunk" ? "agent thought" : "agent";
      this.agentSpan.dataset.kind = kind;
      this.#append(this.agentSpan);
    }
    this.agentSpan.textContent += text;
    this.transcript.scrollTop = this.transcript.scrollHeight;
  }

  /** tool_call and tool_call_update: one entry per tool call, its status kept current. */
  toolCall(update) {
    const id = String(update.toolCallId ?? "");
    let tool = this.tools.get(id);
    if (!tool || !tool.isConnected) {
      tool = document.createElement("div");
      tool.className = "tool";
      tool.dataset.toolCallId = id;
      tool.append(span("tool-title", "(a tool call)"), " ", span("tool-kind", "other"), " ",
        span("tool-status", "pending"));
      remember(this.tools, id, tool);
      this.place(tool);
    }
    if (typeof update.title === "string") tool.querySelector(".tool-title").textContent = update.title;
    if (typeof update.kind === "string") tool.querySelector(".tool-kind").textContent = update.kind;
    if (typeof update.status === "string") {
      const status = tool.querySelector(".tool-status");
      status.textContent = update.status;
      status.dataset.status = update.status;
    }
    if (this.agentSpan) this.agentSpan = null;
  }

  /** What the transcript shows of a message of the conversation (prompts, agent text, tool
   * calls, the turn's end); the rest is the log's. */
  show(direction, message) {
    const change = changeOf(direction, message, this.pending);
    switch (change.change) {
      case "Prompted":
        this.turn(change.blocks.map((b) => (b.type === "text" ? String(b.text) : `[${b.type}]`)).join(""));
        break;
      case "Said":
        if (change.speaker !== "user" && change.text !== null) {
          this.agentText(change.speaker === "thought" ? "agent_thought_chunk" : "agent_message_chunk",
            change.text);
        }
        break;
      case "ToolCallChanged":
        this.toolCall(change.call);
        break;
      case "TurnEnded":
        this.endTurn();
        break;
    }
  }
}

/** What one message changed, in the words of the relay's conversation model
 * (relay/acp/changes.py): `change` names the class, the fields are its fields. Only what
 * the transcript shows is read here; the rest is "Other" (the log shows every line).
 * `pending`: id of a request to the agent -> its method. */
export function changeOf(direction, message, pending) {
  if (!isObject(message)) return { change: "Other" };
  const params = isObject(message.params) ? message.params : {};
  if (direction === "to_agent" && message.method === "session/prompt") {
    const blocks = Array.isArray(params.prompt) ? params.prompt.filter(isObject) : [];
    return { change: "Prompted", requestId: message.id, blocks };
  }
  const update = message.method === "session/update" && params.update;
  if (!isObject(update)) {
    if ("id" in message && !("method" in message) && direction === "to_client" &&
        pending.get(message.id) === "session/prompt") {
      const result = isObject(message.result) ? message.result : {};
      return { change: "TurnEnded", requestId: message.id, stopReason: result.stopReason ?? null };
    }
    return { change: "Other" };
  }
  const kind = update.sessionUpdate;
  if (kind in SPEAKERS) {
    const content = update.content;
    const text = isObject(content) && content.type === "text" ? String(content.text) : null;
    return { change: "Said", speaker: SPEAKERS[kind], text };
  }
  if (kind === "tool_call" || kind === "tool_call_update") {
    return { change: "ToolCallChanged", started: kind === "tool_call", call: update };
  }
  return { change: "Other" };
}

const SPEAKERS = {
  user_message_chunk: "user", agent_message_chunk: "agent", agent_thought_chunk: "thought",
};
