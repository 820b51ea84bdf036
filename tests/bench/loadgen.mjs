// Load generator for the acp-relay benchmark: one JSON command in argv[2] (or @FILE holding
// it), one JSON result
// on stdout. Written for Node.js + ws so that the client is not the bottleneck; its own
// ceiling is measured against echo.mjs in the same run.
//
//   rate        {url, size, inflight, seconds}        messages/s and round-trip percentiles
//   bulk        {url, size, count, inflight, timeout} MB/s for large messages, or an error
//   first_byte  {urls}                                connect -> first agent byte, per URL
//   idle        {urls}                                open all, print {"open": n}, hold until stdin closes
import { readFileSync } from "node:fs";
import WebSocket from "ws";

const OPTIONS = { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 };
const now = () => Number(process.hrtime.bigint()) / 1e6; // milliseconds

function open(url) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, OPTIONS);
    ws.once("open", () => resolve(ws));
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
  });
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

async function rate({ url, size, inflight, seconds }) {
  const ws = await open(url);
  const sentAt = new Map();
  const rtts = [];
  let next = 0;
  let received = 0;
  const send = () => {
    sentAt.set(next, now());
    ws.send(payload(size, next));
    next += 1;
  };
  const start = now();
  const deadline = start + seconds * 1000;
  await new Promise((resolve, reject) => {
    ws.on("message", (data) => {
      const text = data.toString();
      const i = Number(text.slice(text.indexOf('"i":') + 4, text.indexOf(",", text.indexOf('"i":'))));
      rtts.push(now() - sentAt.get(i));
      sentAt.delete(i);
      received += 1;
      if (now() < deadline) send();
      else if (sentAt.size === 0) resolve();
    });
    ws.on("close", (code) => reject(new Error(`closed ${code}`)));
    for (let k = 0; k < inflight; k += 1) send();
  });
  const elapsed = (now() - start) / 1000;
  ws.terminate();
  rtts.sort((a, b) => a - b);
  return {
    messages: received,
    seconds: elapsed,
    rate: received / elapsed,
    p50_ms: percentile(rtts, 50),
    p99_ms: percentile(rtts, 99),
  };
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
        resolve({ error: `message of ${data.length} bytes came back as ${body.length}` });
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
  for (let k = 0; k < urls.length; k += 50) {
    sockets.push(...(await Promise.all(urls.slice(k, k + 50).map(open))));
  }
  process.stdout.write(JSON.stringify({ open: sockets.length }) + "\n");
  await new Promise((resolve) => {
    process.stdin.on("end", resolve);
    process.stdin.on("close", resolve);
    process.stdin.resume();
  });
  sockets.forEach((ws) => ws.terminate());
  return { closed: sockets.length };
}

const COMMANDS = { rate, bulk, first_byte: firstByte, idle };
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
