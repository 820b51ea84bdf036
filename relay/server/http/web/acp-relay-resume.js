// acp-relay-resume.js: a WebSocket that resumes (acp-relay's profile acp-relay.resume.v1).
//
// A dependency-free ES module, served by the relay at /acp-relay-resume.js. Its class has
// the browser WebSocket interface (constructor, readyState, send, close, onmessage, ...)
// and does the resuming inside: when the socket is lost without the relay's close frame,
// it reconnects with backoff and jitter, with a fresh ticket each time (carried as the
// subprotocol acp-ticket.<ticket>, never in the URL), within the grace the relay
// advertises; the page sees a pause, then every message once, in order. The wire format
// is docs/resume.md's.
//
//   import { resumingWebSocket } from "https://relay.example/acp-relay-resume.js";
//   const ResumingWebSocket = resumingWebSocket({
//     ticket: async () => (await fetch("/my-ticket", { method: "POST" })).text(),
//   });
//   const ws = new ResumingWebSocket("wss://relay.example/acp");
//   ws.addEventListener("resuming", (e) => show("connection lost, resuming…"));
//   ws.addEventListener("resumed", (e) => show(`resumed after ${e.detail.seconds} s, ` +
//     `${e.detail.replayed} messages replayed`));
//   ws.addEventListener("failed", (e) => show(`could not resume: ${e.detail.reason}`));
//
// The class returned by resumingWebSocket() fits where only a constructor does, e.g. the
// WebSocket option of the ACP TypeScript SDK's createWebSocketStream; in Node, pass
// `WebSocket` (from the `ws` package) for the inner sockets. Options:
//
//   ticket          () => string | Promise<string>: a fresh single-use ticket for each
//                   socket, the first included, sent as the subprotocol acp-ticket.<ticket>
//                   (the URL then must carry none). Without it the URL is used as given
//                   (?ticket=) and a lost connection cannot be resumed (a ticket is spent
//                   by its socket).
//   WebSocket       the inner socket's constructor (default: globalThis.WebSocket).
//   headers         headers for inner sockets that take them (Node's ws), not a ticket.
//   storage         a Storage (sessionStorage) to keep the resume state in, so that a
//                   reloaded page resumes; storageKey names the entry. Default: memory only.
//   backoffFirstMs, backoffMostMs   reconnect delays: full jitter, doubling (100, 2000).
//   openTimeoutMs   one attempt, from asking for a ticket to the relay's welcome (10000).
//   ackEvery, ackDelayMs            acknowledge every N records, or after this delay (64, 100).
//   maxKeptMessages, maxKeptBytes   messages kept until the relay acknowledges them (send
//                   throws past these: 4096 messages, 16 MiB).
//   staleAfterMs    a message unacknowledged this long means the socket is dead: resume
//                   (15000; 0: never). Browsers cannot see the relay's heartbeats.
//
// Besides open/message/error/close it dispatches "resuming" {reason, grace} when a socket
// is lost, "resumed" {seconds, replayed, resent} once a new socket has delivered the
// backlog the relay kept (seconds: from the loss to the relay's welcome; replayed: the
// records kept for the page; resent: the page's messages the relay lacked), and "failed"
// {reason, code} (then a close event with the relay's code and reason, e.g. 4404).
// close() or close(1000) ends the connection at the relay at once (while resuming there is
// no socket to say so: the relay then ends it when its grace runs out).
// The resume secret stays in a private field (and the storage, if given): never in a URL,
// never logged. If the relay does not select the profile, this is a plain WebSocket.

export const PROFILE = "acp-relay.resume.v1";
export const ACP_V1 = "acp.v1";
export const TICKET_PREFIX = "acp-ticket.";

const CONNECTING = 0;
const OPEN = 1;
const CLOSING = 2;
const CLOSED = 3;

const ABANDONED = 4000; // close code for a socket given up on (never 1000: that would end it)
const PROFILE_BROKEN = 1002;
const NO_CLOSE_FRAME = 1006;
const MAX_SEQ = Number.MAX_SAFE_INTEGER; // 2^53 - 1, as the profile says

const DEFAULTS = Object.freeze({
  ticket: undefined,
  WebSocket: undefined,
  headers: undefined,
  storage: undefined,
  storageKey: undefined,
  backoffFirstMs: 100,
  backoffMostMs: 2000,
  openTimeoutMs: 10000,
  ackEvery: 64,
  ackDelayMs: 100,
  maxKeptMessages: 4096,
  maxKeptBytes: 16 * 1024 * 1024,
  staleAfterMs: 15000,
  random: Math.random,
});

const BOUND = Symbol("acp-relay-resume options");
const noop = () => {};

// -- the wire format (pure) ---------------------------------------------------------------

/** A frame that breaks the profile; the message says how. */
export class ProfileError extends Error {
  constructor(message) {
    super(message);
    this.name = "ProfileError";
  }
}

/** Where the ticket goes: the subprotocol `acp-ticket.<ticket>`, beside the offered ones.
 * The relay never selects it; it keeps the ticket out of URLs (and so out of logs). */
export function withTicket(url, protocols, ticket) {
  return { url, protocols: [...protocols, TICKET_PREFIX + ticket] };
}

/** The frame that carries `message` as client message `seq`, maybe with an ack riding on it. */
export function messageFrame(seq, message, ack) {
  const head = ack === undefined ? `{"seq":${seq}}` : `{"seq":${seq},"ack":${ack}}`;
  return `${head}\n${message}`;
}

/** A cumulative acknowledgement alone. */
export function ackFrame(ack) {
  return `{"ack":${ack}}`;
}

/** The first frame of a socket: open a new connection, or resume `state.connection`. */
export function firstFrame(state) {
  if (!state) return '{"type":"open"}';
  const { connection, secret, ack, sent } = state;
  return JSON.stringify({ type: "resume", connection, secret, ack, sent });
}

/** A relay frame after the welcome: {seq, ack, message} for a record, {ack} for an ack alone.
 * The message is the text after the first "\n", exactly as received. */
export function parseRelayFrame(text) {
  const cut = text.indexOf("\n");
  const fields = header(cut < 0 ? text : text.slice(0, cut));
  if (cut < 0) {
    only(fields, ["ack"]);
    return { ack: whole(fields, "ack") };
  }
  only(fields, ["seq", "ack"]);
  const frame = { seq: whole(fields, "seq"), message: text.slice(cut + 1) };
  if ("ack" in fields) frame.ack = whole(fields, "ack");
  return frame;
}

/** The relay's welcome, checked. */
export function parseWelcome(text) {
  const fields = header(text);
  if (fields.type !== "welcome") throw new ProfileError("expected the relay's welcome");
  for (const key of ["connection", "secret"]) {
    if (typeof fields[key] !== "string" || !fields[key]) {
      throw new ProfileError(`welcome: '${key}' must be a non-empty string`);
    }
  }
  const grace = fields.grace;
  if (typeof grace !== "number" || !(grace >= 0)) {
    throw new ProfileError("welcome: 'grace' must be a number of seconds");
  }
  const next = whole(fields, "next");
  return {
    connection: fields.connection,
    secret: fields.secret,
    resumed: fields.resumed === true,
    received: whole(fields, "received"),
    next,
    grace,
    window: whole(fields, "window"),
    last: "last" in fields ? atLeast(whole(fields, "last"), next - 1, "last") : next - 1,
  };
}

function atLeast(value, least, key) {
  if (value < least) throw new ProfileError(`'${key}' must be at least ${least}`);
  return value;
}

function header(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ProfileError(`frame header is not JSON: ${error.message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new ProfileError("frame header is not a JSON object");
  }
  return value;
}

function only(fields, allowed) {
  const extra = Object.keys(fields).find((key) => !allowed.includes(key));
  if (extra !== undefined) throw new ProfileError(`frame header has unknown field '${extra}'`);
}

function whole(fields, key) {
  const value = fields[key];
  if (!Number.isSafeInteger(value) || value < 0 || value > MAX_SEQ) {
    throw new ProfileError(`'${key}' must be a whole number from 0 to 2^53-1`);
  }
  return value;
}

/** Milliseconds before reconnect `attempt` (0 first): full jitter, doubling up to `mostMs`. */
export function backoffMs(attempt, rand, firstMs = 100, mostMs = 2000) {
  return rand * Math.min(mostMs, firstMs * 2 ** attempt);
}

/** Whether a socket that closed this way may be resumed: the relay did not end it.
 *
 * A close frame from the relay says why the connection is over (the agent's exit, a
 * refusal, a fencing socket, shutdown), except the heartbeat's: a relay that stopped
 * hearing pongs closes with 1011 "keepalive ping timeout" and keeps the connection
 * detached, and that frame reaches the page when the network comes back. */
export function resumableClose(code, reason) {
  return code === NO_CLOSE_FRAME || (code === 1011 && reason === "keepalive ping timeout");
}

/** The UTF-8 length of a string, without encoding it. */
export function utf8Length(text) {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0x80) bytes += 1;
    else if (unit < 0x800) bytes += 2;
    else if (unit >= 0xd800 && unit < 0xdc00 && i + 1 < text.length) {
      const low = text.charCodeAt(i + 1);
      if (low >= 0xdc00 && low < 0xe000) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

// -- events ------------------------------------------------------------------------------

function messageEvent(data) {
  if (typeof MessageEvent === "function") return new MessageEvent("message", { data });
  return withFields(new Event("message"), { data });
}

function closeEvent(code, reason, wasClean) {
  if (typeof CloseEvent === "function") return new CloseEvent("close", { code, reason, wasClean });
  return withFields(new Event("close"), { code, reason, wasClean });
}

function stateEvent(type, detail) {
  if (typeof CustomEvent === "function") return new CustomEvent(type, { detail });
  return withFields(new Event(type), { detail });
}

function withFields(event, fields) {
  for (const [name, value] of Object.entries(fields)) {
    Object.defineProperty(event, name, { value, enumerable: true });
  }
  return event;
}

// -- the state kept across sockets ---------------------------------------------------------

function loadState(storage, key) {
  if (!storage) return undefined;
  try {
    const state = JSON.parse(storage.getItem(key) || "null");
    const numbers = ["ack", "sent"].every((k) => Number.isSafeInteger(state?.[k]));
    const texts = ["connection", "secret"].every((k) => typeof state?.[k] === "string");
    return numbers && texts && Array.isArray(state.kept) ? state : undefined;
  } catch {
    return undefined;
  }
}

function saveState(storage, key, state) {
  if (!storage) return;
  try {
    if (state === undefined) storage.removeItem(key);
    else storage.setItem(key, JSON.stringify(state));
  } catch {
    // a full or disabled storage: the connection still resumes, a reload will not
  }
}

function socketUrl(url) {
  const base = globalThis.location?.href;
  let parsed;
  try {
    parsed = base === undefined ? new URL(url) : new URL(url, base);
  } catch {
    throw new DOMException(`'${url}' is not a valid URL`, "SyntaxError");
  }
  if (parsed.protocol === "http:") parsed.protocol = "ws:";
  if (parsed.protocol === "https:") parsed.protocol = "wss:";
  if (!["ws:", "wss:"].includes(parsed.protocol) || parsed.hash) {
    throw new DOMException(`'${url}' is not a ws: or wss: URL`, "SyntaxError");
  }
  return parsed.href;
}

function protocolList(protocols) {
  const list = protocols === undefined ? [] : typeof protocols === "string" ? [protocols] : [...protocols];
  if (new Set(list).size !== list.length) {
    throw new DOMException("a subprotocol is offered twice", "SyntaxError");
  }
  return list;
}

function merged(...layers) {
  const options = { ...DEFAULTS };
  for (const layer of layers) {
    for (const [name, value] of Object.entries(layer || {})) {
      if (value !== undefined) options[name] = value;
    }
  }
  return options;
}

// -- the class -------------------------------------------------------------------------------

/** A WebSocket to acp-relay that resumes the connection across lost sockets. */
export class ResumingWebSocket extends EventTarget {
  static CONNECTING = CONNECTING;
  static OPEN = OPEN;
  static CLOSING = CLOSING;
  static CLOSED = CLOSED;

  #url;
  #protocols; // what the page offered
  #options;
  #state = "connecting"; // connecting, open, resuming, closing, closed
  #plain = false; // the relay selected plain ACP: no resuming
  #ws = null; // the current inner socket
  #generation = 0; // events of older inner sockets are ignored
  #binaryType = undefined;
  #handlers = new Map(); // on<type> properties: type -> {f, listener}
  #key;
  // the connection, once welcomed
  #connection = "";
  #secret = "";
  #grace = 0;
  #fromStorage = false;
  // relay -> page
  #last = 0; // the last record received (every one before it too)
  #acked = 0; // the last record the relay was told of
  #ackTimer = undefined;
  // page -> relay
  #sent = 0; // the last message numbered
  #kept = new Map(); // seq -> message, until the relay acknowledges it
  #keptBytes = 0;
  #unwrittenBytes = 0; // kept, numbered while no socket was attached
  #staleTimer = undefined;
  // resuming
  #lostAt = 0;
  #deadline = 0;
  #attempt = 0;
  #why = "";
  #retryTimer = undefined;
  #openTimer = undefined;
  #catchUp = undefined;

  constructor(url, protocols, options) {
    super();
    this.#url = socketUrl(url);
    this.#protocols = protocolList(protocols);
    this.#options = merged(new.target?.[BOUND], options);
    const given = new URL(this.#url).searchParams.has("ticket") ||
      this.#protocols.some((p) => p.startsWith(TICKET_PREFIX));
    if (this.#options.ticket && given) {
      throw new DOMException(
        "a ticket is in the URL or the subprotocols and the ticket option is given: " +
          "leave it to the ticket option",
        "SyntaxError",
      );
    }
    this.#key = this.#options.storageKey ?? `${PROFILE} ${this.#url}`;
    const stored = loadState(this.#options.storage, this.#key);
    if (stored) this.#restore(stored);
    this.#connect();
  }

  // -- the WebSocket interface --------------------------------------------------------------

  get url() { return this.#url; }
  get extensions() { return this.#ws?.extensions ?? ""; }

  /** "acp.v1" once open if the page offered it (the relay speaks it, plain or resuming). */
  get protocol() {
    if (this.#state === "connecting") return "";
    return this.#protocols.includes(ACP_V1) ? ACP_V1 : "";
  }

  get readyState() {
    switch (this.#state) {
      case "connecting": return CONNECTING;
      case "open": case "resuming": return OPEN;
      case "closing": return CLOSING;
      default: return CLOSED;
    }
  }

  get bufferedAmount() {
    return (this.#ws?.bufferedAmount ?? 0) + this.#unwrittenBytes;
  }

  get binaryType() { return this.#binaryType ?? this.#ws?.binaryType ?? "blob"; }
  set binaryType(value) {
    this.#binaryType = value;
    if (this.#ws) this.#ws.binaryType = value;
  }

  /** Whether this connection continued one kept in the storage (a reloaded page). */
  get resumedFromStorage() { return this.#fromStorage; }

  /** The connection's id once the relay welcomed it ("" before, and over plain ACP): the
   * id a watcher's ticket names (acp-relay ticket --watch ID). */
  get connection() { return this.#plain ? "" : this.#connection; }

  get onopen() { return this.#handlers.get("open")?.f ?? null; }
  set onopen(f) { this.#handler("open", f); }
  get onmessage() { return this.#handlers.get("message")?.f ?? null; }
  set onmessage(f) { this.#handler("message", f); }
  get onerror() { return this.#handlers.get("error")?.f ?? null; }
  set onerror(f) { this.#handler("error", f); }
  get onclose() { return this.#handlers.get("close")?.f ?? null; }
  set onclose(f) { this.#handler("close", f); }

  #handler(type, f) {
    const old = this.#handlers.get(type);
    if (old) this.removeEventListener(type, old.listener);
    this.#handlers.delete(type);
    if (typeof f !== "function") return;
    const listener = (event) => f.call(this, event);
    this.#handlers.set(type, { f, listener });
    this.addEventListener(type, listener);
  }

  /** Send a text message; while resuming it is kept and sent after the resume. */
  send(data) {
    if (this.#state === "connecting") {
      throw new DOMException("the socket is still connecting", "InvalidStateError");
    }
    if (this.#state === "closing" || this.#state === "closed") return;
    if (this.#plain) {
      this.#ws.send(data);
      return;
    }
    if (typeof data !== "string") {
      throw new TypeError(`${PROFILE} carries text messages only`);
    }
    const size = utf8Length(data);
    const { maxKeptMessages, maxKeptBytes } = this.#options;
    if (this.#kept.size && (this.#kept.size >= maxKeptMessages || this.#keptBytes + size > maxKeptBytes)) {
      throw new DOMException(
        `more than ${this.#kept.size} messages (${this.#keptBytes} bytes) wait for the relay`,
        "QuotaExceededError",
      );
    }
    const seq = ++this.#sent;
    this.#kept.set(seq, data);
    this.#keptBytes += size;
    this.#save();
    if (this.#state !== "open") {
      this.#unwrittenBytes += size;
      return;
    }
    this.#ws.send(messageFrame(seq, data, this.#ackToRide()));
    this.#watchAcks();
  }

  /** Close: with 1000 (the default) the relay ends the connection and its agent at once. */
  close(code, reason) {
    if (code !== undefined && code !== 1000 && !(code >= 3000 && code <= 4999)) {
      throw new DOMException(`close code ${code} is not 1000 or 3000-4999`, "InvalidAccessError");
    }
    const why = reason === undefined ? "" : String(reason);
    if (utf8Length(why) > 123) throw new DOMException("close reason over 123 bytes", "SyntaxError");
    if (this.#state === "closing" || this.#state === "closed") return;
    this.#forget();
    if (this.#state === "open" && this.#ws) {
      this.#state = "closing";
      this.#clearTimers();
      this.#ws.close(code ?? 1000, why);
      return; // the close event comes with the inner socket's
    }
    const connecting = this.#state === "connecting";
    this.#end();
    this.#abandon();
    setTimeout(() => {
      if (connecting) this.dispatchEvent(new Event("error"));
      this.dispatchEvent(closeEvent(NO_CLOSE_FRAME, "", false));
    }, 0);
  }

  // -- sockets ------------------------------------------------------------------------------

  #restore(stored) {
    this.#fromStorage = true;
    this.#connection = stored.connection;
    this.#secret = stored.secret;
    this.#last = this.#acked = stored.ack;
    this.#sent = stored.sent;
    this.#grace = Number(stored.grace) || 0;
    for (const [seq, message] of stored.kept) {
      this.#kept.set(seq, message);
      this.#keptBytes += utf8Length(message);
    }
  }

  /** A new inner socket (the first, or a resume): ticket, handshake, then the first frame.
   * One timer bounds the whole attempt, the ticket function's wait included. */
  async #connect() {
    const generation = ++this.#generation;
    const mine = () => generation === this.#generation;
    let waitingFor = "ticket";
    const timeout = this.#state === "resuming"
      ? Math.min(this.#options.openTimeoutMs, Math.max(this.#deadline - Date.now(), 0))
      : this.#options.openTimeoutMs;
    this.#openTimer = setTimeout(() => {
      if (mine()) this.#attemptFailed(`no ${waitingFor} in time`);
    }, timeout);
    let target = { url: this.#url, protocols: this.#offered() };
    try {
      if (this.#options.ticket) {
        const ticket = String(await this.#options.ticket() ?? "").trim(); // a body's "\n" too
        if (!ticket) throw new Error("the ticket function gave no ticket");
        target = withTicket(target.url, target.protocols, ticket);
      }
    } catch (error) {
      if (mine()) this.#attemptFailed(`no ticket: ${error?.message ?? error}`);
      return;
    }
    if (!mine()) return; // closed, or timed out, meanwhile
    waitingFor = "welcome from the relay";
    let ws;
    try {
      const Inner = this.#options.WebSocket ?? globalThis.WebSocket;
      const headers = this.#options.headers;
      ws = headers ? new Inner(target.url, target.protocols, { headers }) : new Inner(target.url, target.protocols);
    } catch (error) {
      this.#attemptFailed(`cannot open a socket: ${error?.message ?? error}`);
      return;
    }
    if (this.#binaryType !== undefined) ws.binaryType = this.#binaryType;
    this.#ws = ws;
    ws.onopen = () => mine() && this.#opened(ws);
    ws.onmessage = (event) => mine() && this.#received(event);
    ws.onerror = () => mine() && this.#innerError();
    ws.onclose = (event) => mine() && this.#innerClosed(event.code, event.reason, event.wasClean);
  }

  #offered() {
    const offered = [PROFILE, ...this.#protocols.filter((p) => p !== PROFILE)];
    return offered.includes(ACP_V1) ? offered : [...offered, ACP_V1];
  }

  #opened(ws) {
    if (ws.protocol === PROFILE) {
      const resume = this.#connection ? {
        connection: this.#connection, secret: this.#secret, ack: this.#last, sent: this.#sent,
      } : undefined;
      ws.send(firstFrame(resume));
      return; // the welcome comes as the first message
    }
    clearTimeout(this.#openTimer);
    if (this.#state === "resuming") {
      this.#abandon(1000, ""); // a new agent on plain ACP, which nobody wants
      this.#fail(NO_CLOSE_FRAME, "", `the relay did not select ${PROFILE}: it cannot resume`);
      return;
    }
    if (this.#fromStorage) this.#reset(); // a stored connection cannot go on over plain ACP
    this.#plain = true;
    this.#state = "open";
    this.dispatchEvent(new Event("open"));
  }

  #received(event) {
    if (this.#plain) {
      if (this.#state === "open") this.dispatchEvent(messageEvent(event.data));
      return;
    }
    if (typeof event.data !== "string") return; // binary frames are ignored, as by the relay
    try {
      if (this.#state === "open" || this.#state === "closing") this.#record(event.data);
      else this.#welcomed(parseWelcome(event.data));
    } catch (error) {
      if (!(error instanceof ProfileError)) throw error;
      const reason = `breaks ${PROFILE}: ${error.message}`.slice(0, 120);
      this.#abandon(PROFILE_BROKEN, reason);
      this.#fail(PROFILE_BROKEN, reason, `the relay broke the profile: ${error.message}`);
    }
  }

  #welcomed(welcome) {
    clearTimeout(this.#openTimer);
    const resuming = this.#state === "resuming";
    if (this.#connection && (!welcome.resumed || welcome.next !== this.#last + 1)) {
      throw new ProfileError(`a resume welcomed at record ${welcome.next}, after ${this.#last}`);
    }
    this.#connection = welcome.connection;
    this.#secret = welcome.secret;
    this.#grace = welcome.grace;
    this.#acked = welcome.next - 1;
    const resent = this.#acknowledge(welcome.received, true);
    for (const [seq, message] of resent) this.#ws.send(messageFrame(seq, message));
    this.#unwrittenBytes = 0;
    const opening = this.#state === "connecting";
    this.#state = "open";
    this.#save();
    this.#watchAcks();
    if (opening) this.dispatchEvent(new Event("open"));
    if (resuming) this.#startCatchUp(welcome, resent.length);
  }

  #record(text) {
    const frame = parseRelayFrame(text);
    if (frame.ack !== undefined) this.#acknowledge(frame.ack);
    if (frame.seq === undefined || frame.seq <= this.#last) return; // an ack, or a record we have
    if (frame.seq !== this.#last + 1) {
      throw new ProfileError(`record ${this.#last + 1} is missing (got ${frame.seq})`);
    }
    this.#last = frame.seq;
    this.#ackSoon();
    if (this.#state === "open") this.dispatchEvent(messageEvent(frame.message));
    if (this.#catchUp && this.#last >= this.#catchUp.until) this.#caughtUp();
  }

  #innerError() {
    if (this.#plain || this.#state === "connecting") this.dispatchEvent(new Event("error"));
  }

  #innerClosed(code, reason, wasClean) {
    clearTimeout(this.#openTimer);
    const state = this.#state;
    if (state === "closing" || (this.#plain && state === "open")) {
      this.#end();
      this.dispatchEvent(closeEvent(code, reason, wasClean));
    } else if (state === "open" && resumableClose(code, reason)) {
      this.#lose(reason ? `closed with ${code}: ${reason}` : "lost (no close frame)");
    } else if (state === "open") {
      this.#forget(); // the relay ended the connection, and says why
      this.#end();
      this.dispatchEvent(closeEvent(code, reason, wasClean));
    } else if (state === "resuming" && resumableClose(code, reason)) {
      this.#attemptFailed(reason || "the socket could not be opened");
    } else if (state === "resuming") {
      this.#fail(code, reason, `the relay refused to resume: ${reason || code}`);
    } else if (this.#fromStorage && code !== NO_CLOSE_FRAME) {
      this.#startOver(); // the stored connection is gone: a new one for the reloaded page
    } else {
      this.#end();
      this.dispatchEvent(closeEvent(code, reason, wasClean));
    }
  }

  /** An attempt at a socket failed: retry while resuming, else the first socket failed. */
  #attemptFailed(why) {
    clearTimeout(this.#openTimer);
    if (this.#state === "resuming") {
      this.#why = why;
      this.#abandon();
      this.#nextAttempt();
      return;
    }
    if (this.#state !== "connecting") return;
    this.#abandon();
    this.#end();
    this.dispatchEvent(new Event("error"));
    this.dispatchEvent(closeEvent(NO_CLOSE_FRAME, "", false));
  }

  // -- resuming -----------------------------------------------------------------------------

  #lose(why) {
    this.#abandon();
    this.#clearTimers();
    if (!this.#options.ticket) {
      this.#fail(NO_CLOSE_FRAME, "", `cannot resume without a ticket function (${why})`);
      return;
    }
    this.#state = "resuming";
    this.#lostAt = Date.now();
    this.#deadline = this.#lostAt + this.#grace * 1000;
    this.#attempt = 0;
    this.#why = why;
    this.dispatchEvent(stateEvent("resuming", { reason: why, grace: this.#grace }));
    this.#nextAttempt();
  }

  #nextAttempt() {
    const left = this.#deadline - Date.now();
    if (left <= 0) {
      const why = `could not resume within the relay's grace of ${this.#grace} s (${this.#why})`;
      this.#fail(NO_CLOSE_FRAME, "", why);
      return;
    }
    const { backoffFirstMs, backoffMostMs, random } = this.#options;
    const pause = Math.min(backoffMs(this.#attempt++, random(), backoffFirstMs, backoffMostMs), left);
    this.#retryTimer = setTimeout(() => this.#connect(), pause);
  }

  /** After a resume's welcome: "resumed" once the backlog the relay kept (records `next`
   * to `last`) has been delivered to the page, at once when there is none. */
  #startCatchUp(welcome, resent) {
    const seconds = (Date.now() - this.#lostAt) / 1000;
    const replayed = welcome.last - (welcome.next - 1);
    this.#catchUp = { seconds, resent, replayed, until: welcome.last };
    if (this.#last >= welcome.last) this.#caughtUp();
  }

  #caughtUp() {
    const { seconds, resent, replayed } = this.#catchUp;
    this.#catchUp = undefined;
    this.dispatchEvent(stateEvent("resumed", { seconds, replayed, resent }));
  }

  #fail(code, reason, why) {
    this.#forget();
    this.#end();
    this.#abandon();
    this.dispatchEvent(stateEvent("failed", { reason: why, code }));
    this.dispatchEvent(closeEvent(code, reason, code !== NO_CLOSE_FRAME));
  }

  /** A stored connection the relay no longer has: open a new one instead. */
  #startOver() {
    this.#reset();
    this.#connect();
  }

  #reset() {
    this.#forget();
    this.#fromStorage = false;
    this.#connection = this.#secret = "";
    this.#last = this.#acked = this.#sent = this.#keptBytes = 0;
    this.#kept.clear();
  }

  // -- acknowledgements ---------------------------------------------------------------------

  /** Forget the messages the relay has (up to `ack`); with `resend`, those it lacks, in order. */
  #acknowledge(ack, resend = false) {
    for (const [seq, message] of this.#kept) {
      if (seq > ack) break;
      this.#kept.delete(seq);
      this.#keptBytes -= utf8Length(message);
    }
    this.#watchAcks(true);
    return resend ? [...this.#kept] : [];
  }

  #ackToRide() {
    if (this.#last === this.#acked) return undefined;
    clearTimeout(this.#ackTimer);
    this.#ackTimer = undefined;
    this.#acked = this.#last;
    this.#save();
    return this.#last;
  }

  #ackSoon() {
    if (this.#last - this.#acked >= this.#options.ackEvery) this.#sendAck();
    else if (this.#ackTimer === undefined) {
      this.#ackTimer = setTimeout(() => this.#sendAck(), this.#options.ackDelayMs);
    }
  }

  #sendAck() {
    clearTimeout(this.#ackTimer);
    this.#ackTimer = undefined;
    if (this.#state !== "open" || this.#last === this.#acked) return;
    this.#acked = this.#last;
    this.#save();
    this.#ws.send(ackFrame(this.#acked));
  }

  /** A message unacknowledged for staleAfterMs: the socket is taken for dead. */
  #watchAcks(progress = false) {
    const { staleAfterMs } = this.#options;
    if (progress || !this.#kept.size) {
      clearTimeout(this.#staleTimer);
      this.#staleTimer = undefined;
    }
    if (!staleAfterMs || !this.#kept.size || this.#staleTimer !== undefined || this.#state !== "open") return;
    this.#staleTimer = setTimeout(() => {
      this.#staleTimer = undefined;
      if (this.#state === "open" && this.#kept.size) {
        this.#lose(`no acknowledgement from the relay in ${staleAfterMs / 1000} s`);
      }
    }, staleAfterMs);
  }

  // -- bookkeeping --------------------------------------------------------------------------

  #save() {
    if (!this.#options.storage || !this.#connection) return;
    saveState(this.#options.storage, this.#key, {
      connection: this.#connection, secret: this.#secret, ack: this.#acked, sent: this.#sent,
      kept: [...this.#kept], grace: this.#grace,
    });
  }

  #forget() {
    saveState(this.#options.storage, this.#key, undefined);
  }

  #clearTimers() {
    for (const timer of [this.#ackTimer, this.#staleTimer, this.#retryTimer, this.#openTimer]) {
      clearTimeout(timer);
    }
    this.#ackTimer = this.#staleTimer = this.#retryTimer = this.#openTimer = undefined;
    this.#catchUp = undefined;
  }

  #end() {
    this.#state = "closed";
    this.#clearTimers();
    this.#generation++;
  }

  /** Stop listening to the current inner socket and close it (never with 1000 unless told). */
  #abandon(code = ABANDONED, reason = "resuming on another socket") {
    const ws = this.#ws;
    this.#ws = null;
    this.#generation++;
    if (!ws) return;
    ws.onopen = ws.onmessage = ws.onclose = noop;
    ws.onerror = noop; // Node's ws throws on an error nobody listens to
    try {
      if (ws.readyState === CONNECTING || ws.readyState === OPEN) ws.close(code, reason);
    } catch {
      // closing a socket that is already gone
    }
  }
}

for (const [name, value] of Object.entries({ CONNECTING, OPEN, CLOSING, CLOSED })) {
  Object.defineProperty(ResumingWebSocket.prototype, name, { value, enumerable: true });
}

/** A ResumingWebSocket class with `options` bound: pass it where only a constructor fits. */
export function resumingWebSocket(options) {
  const bound = Object.freeze({ ...options });
  return class BoundResumingWebSocket extends ResumingWebSocket {
    static [BOUND] = bound;
  };
}

export default ResumingWebSocket;
