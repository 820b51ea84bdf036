// Load generator for the acp-relay benchmark: one JSON command in argv[2] (or @FILE holding
// it), one JSON result on stdout. Written for Node.js + ws so that the client is not the
// bottleneck; its own ceiling is measured against echo.mjs in the same run.
//
//   rate        {url, size, inflight, seconds | count, warmup?, gate?, resume?}
//                   messages/s and round-trip percentiles; with `count`, a fixed number of
//                   messages; `gate`: after `warmup` messages print {"warm":true} and wait
//                   for a line on stdin before the measured ones (for profilers);
//                   `resume`: speak the acp-relay.resume.v1 profile (docs/resume.md)
//   bulk        {url, size, count, inflight, timeout} MB/s for large messages, or an error
//   stream      {url, updates, size, mode?, sample?, warmup?, gate?, hold?, timeout}
//                   one prompt, answered by `updates` notifications (tests/bench/streamer.py,
//                   `mode` "text" or "tool"): messages/s delivered to this client; `gate`:
//                   after the warm-up print {"warm":true,"connection":ID} (ID: the 101's
//                   Acp-Connection-Id) and wait for a line on stdin; `hold`: print the result,
//                   then keep the socket open until stdin closes; `sample`: the first
//                   notification as received, in `first`
//   aggregate   {urls, updates, size, timeout}  `stream` on every URL at once: total messages/s
//   first_byte  {urls}                          connect -> first agent byte, per URL
//   idle        {urls}                          open all, print {"open": n}, hold until stdin closes
//   watch       {urls, until?, timeout}         attach every URL as a watcher
//                   (acp-relay.watch.v1), print {"open": n} once each has read its history,
//                   then read on; with `until` (a request id), print {"done": true} once every
//                   watcher has seen the agent's answer to it; frames read and close codes
//                   when stdin closes
import { readFileSync } from "node:fs";
import WebSocket from "ws";

const OPTIONS = { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 };
const now = () => Number(process.hrtime.bigint()) / 1e6; // milliseconds

const RESUME_PROTOCOLS = ["acp-relay.resume.v1", "acp.v1"];

function open(url, protocols) {
  return new Promise((resolve, reject) => {
    const ws = protocols ? new WebSocket(url, protocols, OPTIONS) : new WebSocket(url, OPTIONS);
    ws.once("upgrade", (res) => {
      ws.connectionId = res.headers["acp-connection-id"] || null;
    });
    ws.once("open", () => resolve(ws));
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
  });
}

// A socket as a plain message pipe, or under the resume profile: numbered messages out
// (with the cumulative acknowledgement riding on them), records in (headers stripped).
async function channel(url, resume) {
  if (!resume) {
    const ws = await open(url);
    let handler = () => {};
    ws.on("message", (data) => handler(data));
    return { ws, send: (text) => ws.send(text), onMessage: (fn) => { handler = fn; } };
  }
  const ws = await open(url, RESUME_PROTOCOLS);
  if (ws.protocol !== RESUME_PROTOCOLS[0]) throw new Error(`profile not selected (${ws.protocol})`);
  const welcome = new Promise((resolve) => ws.once("message", resolve));
  ws.send('{"type":"open"}');
  await welcome;
  let seq = 0;
  let received = 0;
  let acked = 0;
  let handler = () => {};
  ws.on("message", (data) => {
    const cut = data.indexOf(10); // "\n": a record; none: a control frame (an ack)
    if (cut < 0) return;
    received += 1;
    handler(data.subarray(cut + 1));
    if (received - acked >= 32) {
      acked = received;
      ws.send(`{"ack":${acked}}`);
    }
  });
  return {
    ws,
    send: (text) => {
      seq += 1;
      acked = received;
      ws.send(`{"seq":${seq},"ack":${received}}\n${text}`);
    },
    onMessage: (fn) => {
      handler = fn;
    },
  };
}

function payload(size, i) {
  const head = `{"jsonrpc":"2.0","method":"bench","params":{"i":${i},"pad":"`;
  const tail = `"}}`;
  return head + "x".repeat(Math.max(0, size - head.length - tail.length)) + tail;
}

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function stdinLine() {
  return new Promise((resolve) => {
    process.stdin.once("data", resolve);
    process.stdin.resume();
  });
}

// Round trips through `cat`: `inflight` messages outstanding, until `seconds` pass or
// `count` messages came back.
async function exchange(link, { size, inflight, seconds, count }) {
  const sentAt = new Map();
  const rtts = [];
  let next = 0;
  let received = 0;
  const send = () => {
    sentAt.set(next, now());
    link.send(payload(size, next));
    next += 1;
  };
  const base = next;
  const start = now();
  const deadline = seconds === undefined ? Infinity : start + seconds * 1000;
  const more = () => (count === undefined ? now() < deadline : next - base < count);
  await new Promise((resolve, reject) => {
    link.onMessage((data) => {
      const text = data.toString();
      const at = text.indexOf('"i":');
      const i = Number(text.slice(at + 4, text.indexOf(",", at)));
      rtts.push(now() - sentAt.get(i));
      sentAt.delete(i);
      received += 1;
      if (more()) send();
      else if (sentAt.size === 0) resolve();
    });
    link.ws.on("close", (code) => reject(new Error(`closed ${code}`)));
    for (let k = 0; k < inflight; k += 1) send();
  });
  const elapsed = (now() - start) / 1000;
  rtts.sort((a, b) => a - b);
  return {
    messages: received,
    seconds: elapsed,
    rate: received / elapsed,
    p50_ms: percentile(rtts, 50),
    p99_ms: percentile(rtts, 99),
  };
}

async function rate({ url, size, inflight, seconds, count, warmup, gate, resume }) {
  const link = await channel(url, resume);
  if (warmup) await exchange(link, { size, inflight, count: warmup });
  if (gate) {
    process.stdout.write(JSON.stringify({ warm: true }) + "\n");
    await stdinLine();
  }
  const result = await exchange(link, { size, inflight, seconds, count });
  link.ws.terminate();
  return result;
}

// One prompt, answered by `updates` notifications then the answer; resolves with the
// figures once the answer came, after checking that every notification came, in order.
function prompt(ws, id, updates, size, mode = "text", sample = false) {
  return new Promise((resolve, reject) => {
    let got = 0;
    let first;
    const start = now();
    const onMessage = (data) => {
      if (data.length < 100 && data.includes('"result"')) {
        ws.off("message", onMessage);
        if (got !== updates) reject(new Error(`${got} of ${updates} notifications came`));
        else resolve({ messages: got, seconds: (now() - start) / 1000, first });
        return;
      }
      const at = data.indexOf('"text":"') + 8;
      const number = Number(data.toString("latin1", at, at + 7));
      if (number !== got) {
        ws.off("message", onMessage);
        reject(new Error(`notification ${got} expected, ${number} came (${data.length} B)`));
        return;
      }
      if (got === 0 && sample) first = data.toString();
      got += 1;
    };
    ws.on("message", onMessage);
    ws.once("close", (code) => reject(new Error(`closed ${code} after ${got} notifications`)));
    const params = { sessionId: "sess_bench", prompt: [], updates, size, mode };
    ws.send(JSON.stringify({ jsonrpc: "2.0", id, method: "session/prompt", params }));
  });
}

function withTimeout(promise, seconds) {
  let timer;
  const limit = new Promise((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timeout after ${seconds} s`)), seconds * 1000);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

async function stream({ url, updates, size, mode, sample, warmup, gate, hold, timeout }) {
  const ws = await open(url);
  try {
    if (warmup) await withTimeout(prompt(ws, 0, warmup, size, mode), timeout);
    if (gate) {
      process.stdout.write(JSON.stringify({ warm: true, connection: ws.connectionId }) + "\n");
      await stdinLine();
    }
    const got = await withTimeout(prompt(ws, 1, updates, size, mode, sample), timeout);
    const result = { ...got, rate: got.messages / got.seconds };
    if (!hold) return result;
    process.stdout.write(JSON.stringify(result) + "\n");
    await stdinEnd();
    return { held: true };
  } finally {
    ws.terminate();
  }
}

async function aggregate({ urls, updates, size, timeout }) {
  const sockets = [];
  for (let k = 0; k < urls.length; k += 25) {
    sockets.push(...(await Promise.all(urls.slice(k, k + 25).map((u) => open(u)))));
  }
  try {
    // A first short prompt on each: every agent is up before the clock starts.
    await withTimeout(Promise.all(sockets.map((ws) => prompt(ws, 0, 1, size))), timeout);
    const start = now();
    const all = await withTimeout(
      Promise.all(sockets.map((ws, k) => prompt(ws, k + 1, updates, size))),
      timeout,
    );
    const seconds = (now() - start) / 1000;
    const messages = all.reduce((sum, got) => sum + got.messages, 0);
    const rates = all.map((got) => got.messages / got.seconds).sort((a, b) => a - b);
    return { sockets: sockets.length, messages, seconds, rate: messages / seconds,
             slowest_socket_rate: rates[0] };
  } finally {
    sockets.forEach((ws) => ws.terminate());
  }
}

async function bulk({ url, size, count, inflight, timeout }) {
  let ws;
  try {
    ws = await open(url);
  } catch (error) {
    return { error: String(error.message || error) };
  }
  const body = payload(size, 0);
  let sent = 0;
  let received = 0;
  let bytes = 0;
  const start = now();
  const outcome = await new Promise((resolve) => {
    const timer = setTimeout(() => resolve({ error: `timeout after ${timeout} s` }), timeout * 1000);
    const send = () => {
      if (sent < count) {
        sent += 1;
        ws.send(body);
      }
    };
    ws.on("message", (data) => {
      received += 1;
      bytes += data.length;
      if (data.length !== body.length) {
        clearTimeout(timer);
        resolve({ error: `message of ${body.length} B came back as ${data.length} B` });
      } else if (received === count) {
        clearTimeout(timer);
        resolve({});
      } else send();
    });
    ws.on("close", (code, reason) => {
      clearTimeout(timer);
      resolve({ error: `closed ${code} ${reason}`.trim() });
    });
    for (let k = 0; k < inflight; k += 1) send();
  });
  const elapsed = (now() - start) / 1000;
  ws.terminate();
  if (outcome.error) return { error: outcome.error, received };
  return { messages: received, seconds: elapsed, mb_per_s: bytes / elapsed / 1e6 };
}

async function firstByte({ urls }) {
  const times = [];
  for (const url of urls) {
    const start = now();
    const ws = new WebSocket(url, OPTIONS);
    await new Promise((resolve, reject) => {
      ws.once("message", resolve);
      ws.once("error", reject);
      ws.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    });
    times.push(now() - start);
    ws.terminate();
  }
  times.sort((a, b) => a - b);
  return { count: times.length, p50_ms: percentile(times, 50), p99_ms: percentile(times, 99) };
}

async function idle({ urls }) {
  const sockets = [];
  // 25 at a time: the relay takes at most 32 handshakes at once from one address.
  for (let k = 0; k < urls.length; k += 25) {
    sockets.push(...(await Promise.all(urls.slice(k, k + 25).map((u) => open(u)))));
  }
  process.stdout.write(JSON.stringify({ open: sockets.length }) + "\n");
  await stdinEnd();
  sockets.forEach((ws) => ws.terminate());
  return { closed: sockets.length };
}

function stdinEnd() {
  return new Promise((resolve) => {
    process.stdin.on("end", resolve);
    process.stdin.on("close", resolve);
    process.stdin.resume();
  });
}

const WATCH_PROTOCOLS = ["acp-relay.watch.v1"];

// One watcher: counts the frames it reads; `caughtUp` once the history announced by its
// first frame has come, `answered` once the agent's answer to request `until` has.
// Listening from the start: the history comes right after the 101.
async function watcher(url, until) {
  const ws = new WebSocket(url, WATCH_PROTOCOLS, OPTIONS);
  const state = { ws, frames: 0, closed: null };
  let history = Infinity;
  let caughtUp;
  let answered;
  state.caughtUp = new Promise((resolve) => { caughtUp = resolve; });
  state.answered = new Promise((resolve) => { answered = resolve; });
  const end = `"id":${until},"result"`;
  ws.on("message", (data) => {
    state.frames += 1;
    if (state.frames === 1) {
      history = JSON.parse(data.toString()).history.messages;
    }
    if (state.frames === history + 1) caughtUp();
    if (until !== undefined && data.length < 160 && data.includes(end)) answered();
  });
  ws.once("close", (code) => {
    state.closed = code;
    caughtUp();
    answered();
  });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
  });
  return state;
}

async function watch({ urls, until, timeout }) {
  const states = [];
  for (let k = 0; k < urls.length; k += 25) {
    states.push(...(await Promise.all(urls.slice(k, k + 25).map((u) => watcher(u, until)))));
  }
  await withTimeout(Promise.all(states.map((s) => s.caughtUp)), timeout);
  process.stdout.write(JSON.stringify({ open: states.length }) + "\n");
  if (until !== undefined) {
    await withTimeout(Promise.all(states.map((s) => s.answered)), timeout);
    process.stdout.write(JSON.stringify({ done: true }) + "\n");
  }
  await stdinEnd();
  states.forEach((s) => s.ws.terminate());
  return { frames: states.map((s) => s.frames), closed: states.map((s) => s.closed) };
}

const COMMANDS = { rate, bulk, stream, aggregate, first_byte: firstByte, idle, watch };
const arg = process.argv[2];
const command = JSON.parse(arg.startsWith("@") ? readFileSync(arg.slice(1), "utf8") : arg);
COMMANDS[command.command](command)
  .then((result) => {
    process.stdout.write(JSON.stringify(result) + "\n");
    process.exit(0);
  })
  .catch((error) => {
    process.stdout.write(JSON.stringify({ error: String(error.message || error) }) + "\n");
    process.exit(0);
  });
