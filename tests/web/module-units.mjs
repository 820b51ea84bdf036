// The pure functions of relay/server/http/web/acp-relay-resume.js, checked against tables in Node.
// Run by tests/server/http/test_browsermodule_js.py: node module-units.mjs /path/to/acp-relay-resume.js
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";

const m = await import(pathToFileURL(process.argv[2]).href);
let checks = 0;
const check = (what, run) => {
  try {
    run();
  } catch (error) {
    console.error(`FAILED: ${what}\n${error.stack}`);
    process.exit(1);
  }
  checks += 1;
};

check("a message frame is its header, a newline, the message as it is", () => {
  assert.equal(m.messageFrame(3, '{"id":1}'), '{"seq":3}\n{"id":1}');
  assert.equal(m.messageFrame(3, "a\nb", 7), '{"seq":3,"ack":7}\na\nb');
  assert.equal(m.ackFrame(12), '{"ack":12}');
});

check("the first frame opens, or resumes with the connection, secret, ack and sent", () => {
  assert.equal(m.firstFrame(undefined), '{"type":"open"}');
  const resume = { connection: "c", secret: "s", ack: 4, sent: 2 };
  assert.deepEqual(JSON.parse(m.firstFrame(resume)), { type: "resume", ...resume });
});

check("the ticket goes as the acp-ticket.<ticket> subprotocol, never into the URL", () => {
  const target = m.withTicket("ws://h/acp", [m.PROFILE, m.ACP_V1], "T.k-_");
  assert.deepEqual(target, { url: "ws://h/acp", protocols: [m.PROFILE, m.ACP_V1, "acp-ticket.T.k-_"] });
});

check("relay frames: a record keeps everything after the first newline", () => {
  assert.deepEqual(m.parseRelayFrame('{"seq":5}\n{"a":"x\\ny"}\nz'), { seq: 5, message: '{"a":"x\\ny"}\nz' });
  assert.deepEqual(m.parseRelayFrame('{"seq":5,"ack":2}\n'), { seq: 5, ack: 2, message: "" });
  assert.deepEqual(m.parseRelayFrame('{"ack":9}'), { ack: 9 });
});

check("relay frames that break the profile are refused, saying how", () => {
  const bad = [
    ["nope", /not JSON/],
    ["[1]", /not a JSON object/],
    ['{"ack":-1}', /whole number/],
    ['{"ack":1.5}', /whole number/],
    ['{"ack":9007199254740992}', /whole number/],
    ['{"seq":1}', /unknown field 'seq'/],
    ['{"seq":1,"x":2}\nm', /unknown field 'x'/],
    ['{"ack":"1"}\nm', /'seq' must be/],
  ];
  for (const [frame, why] of bad) assert.throws(() => m.parseRelayFrame(frame), m.ProfileError, frame);
  for (const [frame, why] of bad) assert.throws(() => m.parseRelayFrame(frame), why, frame);
});

check("the welcome is read whole; 'last' defaults to no backlog and is never before next", () => {
  const w = { type: "welcome", connection: "c", secret: "s", resumed: true, received: 2, next: 5,
    grace: 60, window: 1024, last: 9 };
  assert.deepEqual(m.parseWelcome(JSON.stringify(w)),
    { connection: "c", secret: "s", resumed: true, received: 2, next: 5, grace: 60, window: 1024, last: 9 });
  const { last, ...older } = w;
  assert.equal(m.parseWelcome(JSON.stringify(older)).last, 4);
  assert.throws(() => m.parseWelcome(JSON.stringify({ ...w, last: 3 })), /'last' must be at least 4/);
  assert.throws(() => m.parseWelcome(JSON.stringify({ ...w, type: "open" })), /expected the relay's welcome/);
  assert.throws(() => m.parseWelcome(JSON.stringify({ ...w, secret: "" })), /'secret'/);
  assert.throws(() => m.parseWelcome(JSON.stringify({ ...w, grace: "60" })), /'grace'/);
});

check("backoff: full jitter, doubling from the first delay up to the most", () => {
  assert.equal(m.backoffMs(0, 1), 100);
  assert.equal(m.backoffMs(3, 1), 800);
  assert.equal(m.backoffMs(10, 1), 2000);
  assert.equal(m.backoffMs(10, 0.5), 1000);
  assert.equal(m.backoffMs(0, 0), 0);
  assert.equal(m.backoffMs(2, 1, 50, 150), 150);
});

check("only a lost socket (no close frame) or the relay's ping timeout may be resumed", () => {
  assert.equal(m.resumableClose(1006, ""), true);
  assert.equal(m.resumableClose(1011, "keepalive ping timeout"), true);
  for (const [code, reason] of [[1000, ""], [1001, ""], [1002, "breaks"], [1011, "agent exited"],
    [4001, "superseded"], [4404, "this relay no longer has the connection"]]) {
    assert.equal(m.resumableClose(code, reason), false, `${code} ${reason}`);
  }
});

check("UTF-8 lengths match Node's, lone surrogates counting as U+FFFD", () => {
  for (const text of ["", "abc", "é", "€", "😀", "a😀b€é", "\ud800", "x\udc00y", "\ud83d\ud83d"]) {
    assert.equal(m.utf8Length(text), Buffer.byteLength(text, "utf8"), JSON.stringify(text));
  }
});

check("the class has the WebSocket constants, on the class and its instances' prototype", () => {
  for (const [name, value] of [["CONNECTING", 0], ["OPEN", 1], ["CLOSING", 2], ["CLOSED", 3]]) {
    assert.equal(m.ResumingWebSocket[name], value);
    assert.equal(m.ResumingWebSocket.prototype[name], value);
  }
});

check("a ticket option with a ticket in the URL or the subprotocols is refused", () => {
  const Bound = m.resumingWebSocket({ ticket: () => "t", WebSocket: class {} });
  assert.throws(() => new Bound("ws://h/acp?ticket=x"), /leave it to the ticket option/);
  assert.throws(() => new Bound("ws://h/acp", ["acp-ticket.x"]), /leave it to the ticket option/);
  assert.throws(() => new Bound("http://h/#x"), /not a ws: or wss: URL/);
  assert.throws(() => new Bound("ws://h/acp", ["a", "a"]), /offered twice/);
});

console.log(`${checks} checks passed`);
