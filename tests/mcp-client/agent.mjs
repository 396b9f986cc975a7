// An agent session (tests/it/mcp.rs, docs/mcp.md): a model behind an OpenAI-compatible chat
// completions endpoint is given hookgate's MCP tools and a goal; each tool call it asks for is
// made with the official MCP SDK over streamable HTTP, its result handed back, until the model
// answers in text. Prints the session as JSON: every message, in order.
//
//   node agent.mjs '{"mcp": URL, "token": T, "model": BASE_URL, "goal": TEXT}'
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const MAX_TURNS = 8;
const plan = JSON.parse(process.argv[2]);
const client = new Client({ name: "hookgate-agent", version: "0.1.0" });
await client.connect(
  new StreamableHTTPClientTransport(new URL(plan.mcp), {
    requestInit: { headers: { Authorization: `Bearer ${plan.token}` } },
  }),
);
const { tools } = await client.listTools();
const functions = tools.map((tool) => ({
  type: "function",
  function: { name: tool.name, description: tool.description, parameters: tool.inputSchema },
}));
const messages = [
  { role: "system", content: client.getInstructions() },
  { role: "user", content: plan.goal },
];
for (let turn = 0; turn < MAX_TURNS; turn++) {
  const answer = await fetch(`${plan.model}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model: "scripted", messages, tools: functions }),
  });
  const { message } = (await answer.json()).choices[0];
  messages.push(message);
  if (!message.tool_calls?.length) break;
  for (const call of message.tool_calls) {
    const result = await client.callTool({
      name: call.function.name,
      arguments: JSON.parse(call.function.arguments),
    });
    messages.push({ role: "tool", tool_call_id: call.id, content: result.content[0].text });
  }
}
await client.close();
console.log(JSON.stringify(messages));
