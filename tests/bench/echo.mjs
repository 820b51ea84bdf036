// The benchmark's ceiling: a trivial WebSocket echo server with no child process.
// Usage: node echo.mjs PORT  (prints {"port": N} once listening on 127.0.0.1)
import { WebSocketServer } from "ws";

const server = new WebSocketServer({
  host: "127.0.0.1",
  port: Number(process.argv[2] || 0),
  perMessageDeflate: false,
  maxPayload: 256 * 1024 * 1024,
});
server.on("connection", (ws) => {
  ws.on("message", (data, isBinary) => ws.send(data, { binary: isBinary }));
});
server.on("listening", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
