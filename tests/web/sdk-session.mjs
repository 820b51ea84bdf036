// One ACP session through the official TypeScript SDK, the same in Node and in a browser:
// initialize, session/new, one session/prompt, every agent_message_chunk collected in
// arrival order. `report` gets progress events ({event: "chunk", chunks}) as they come;
// when the promise `cancelWhen` settles, session/cancel is sent for the prompt.
import { client } from "@agentclientprotocol/sdk";

export async function promptOnce(stream, { cwd, prompt, report = () => {}, cancelWhen }) {
  const chunks = [];
  const app = client({ name: "acp-relay-web-tests" }).onNotification(
    "session/update",
    ({ params }) => {
      const update = params.update;
      if (update.sessionUpdate === "agent_message_chunk" && update.content.type === "text") {
        chunks.push(update.content.text);
        report({ event: "chunk", chunks: chunks.length });
      }
    },
  );
  return app.connectWith(stream, async (agent) => {
    const init = await agent.request("initialize", {
      protocolVersion: 1,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    });
    const session = await agent.request("session/new", { cwd, mcpServers: [] });
    report({ event: "session", sessionId: session.sessionId });
    cancelWhen?.then(() => {
      report({ event: "cancel" });
      return agent.notify("session/cancel", { sessionId: session.sessionId });
    });
    const answer = await agent.request("session/prompt", {
      sessionId: session.sessionId,
      prompt: [{ type: "text", text: prompt }],
    });
    return {
      agent: init.agentInfo?.name ?? null,
      sessionId: session.sessionId,
      agentCwd: session._meta?.demo?.agentCwd ?? null,
      stopReason: answer.stopReason,
      chunks,
    };
  });
}
