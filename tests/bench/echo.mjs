// The benchmark's ceiling: a trivial WebSocket echo server with no child process.
// Usage: node echo.mjs PORT  (prints {"port": N} once listening on 127.0.0.1)
// A `session/prompt` request is answered as tests/bench/streamer.py answers it: `updates`
// session/update notifications of about `size` bytes, then the answer.
import { WebSocketServer } from "ws";

const server = new WebSocketServer({
  host: "127.0.0.1",
  port: Number(process.argv[2] || 0),
  perMessageDeflate: false,
  maxPayload: 256 * 1024 * 1024,
});

const HEAD = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess_bench",';
const MIDDLE = '"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"';
const TAIL = '"}}}}';

function notification(number, size) {
  const text = `${String(number).padStart(7, "0")} `;
  const pad = Math.max(0, size - HEAD.length - MIDDLE.length - TAIL.length - 1 - text.length);
  return HEAD + MIDDLE + text + "x".repeat(pad) + TAIL;
}

function answerPrompt(ws, data) {
  const request = JSON.parse(data.toString());
  const { updates = 0, size = 200 } = request.params || {};
  for (let number = 0; number < updates; number += 1) ws.send(notification(number, size));
  ws.send(JSON.stringify({ jsonrpc: "2.0", id: request.id, result: { stopReason: "end_turn" } }));
}

server.on("connection", (ws) => {
  ws.on("message", (data, isBinary) => {
    if (!isBinary && data.length < 4096 && data.includes('"session/prompt"')) answerPrompt(ws, data);
    else ws.send(data, { binary: isBinary });
  });
});
server.on("listening", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
