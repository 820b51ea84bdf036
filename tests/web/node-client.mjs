// The Node side of tests/server/http/test_browsermodule_js.py: the ACP TypeScript SDK's createWebSocketStream
// over Node's `ws`, either directly or through relay/server/http/web/acp-relay-resume.js.
//
//   node node-client.mjs '{"url": ..., "cwd": ..., "prompt": ..., "protocols": [...],
//                          "module": "/path/acp-relay-resume.js", "ticketCommand": [...]}'
//
// With "module", the socket is the module's ResumingWebSocket (Node's ws inside), and each
// socket's ticket comes from running "ticketCommand"; with "cancelOnResuming" too, the
// prompt is cancelled as soon as the socket is lost (the cancel waits for the resume). Prints one JSON object a line on
// stdout: progress ({event: "chunk" | "session" | "resuming" | "resumed" | "failed"}), then
// {event: "done", result} or {event: "error", message}.
import { execFile } from "node:child_process";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import { WebSocket } from "ws";
import { promptOnce } from "./sdk-session.mjs";

const run = promisify(execFile);
const say = (record) => process.stdout.write(JSON.stringify(record) + "\n");
const closed = []; // a promise per socket, settled by its close event
const CLOSE_WAIT_MS = 2000;
let lost; // resolves at the first "resuming" event
const firstLoss = new Promise((resolve) => { lost = resolve; });

function watchClose(socket) {
  closed.push(new Promise((resolve) => socket.addEventListener("close", (event) => {
    say({ event: "close", code: event.code, reason: event.reason });
    resolve();
  })));
}

async function socketClass(args) {
  if (!args.module) {
    return class Watched extends WebSocket {
      constructor(...rest) {
        super(...rest);
        watchClose(this);
      }
    };
  }
  const { resumingWebSocket } = await import(pathToFileURL(args.module).href);
  // the command's stdout as it is, newline included: the module trims it
  const ticket = async () => (await run(args.ticketCommand[0], args.ticketCommand.slice(1))).stdout;
  const Resuming = resumingWebSocket({ WebSocket, ticket });
  // every socket of the SDK's stream reports its resume state
  return class Reporting extends Resuming {
    constructor(...rest) {
      super(...rest);
      watchClose(this);
      for (const type of ["resuming", "resumed", "failed"]) {
        this.addEventListener(type, (event) => {
          say({ event: type, ...event.detail });
          if (type === "resuming") lost();
        });
      }
    }
  };
}

async function main() {
  const args = JSON.parse(process.argv[2]);
  const stream = createWebSocketStream(args.url, {
    WebSocket: await socketClass(args),
    protocols: args.protocols,
  });
  const result = await promptOnce(stream, {
    cwd: args.cwd,
    prompt: args.prompt,
    report: say,
    cancelWhen: args.cancelOnResuming ? firstLoss : undefined,
  });
  say({ event: "done", result });
  // the SDK closed the socket: let the close handshake finish before the process exits
  const late = new Promise((resolve) => setTimeout(resolve, CLOSE_WAIT_MS));
  await Promise.race([Promise.all(closed), late]);
}

main().then(
  () => process.exit(0),
  (error) => {
    say({ event: "error", message: String(error?.stack ?? error) });
    process.exit(1);
  },
);
