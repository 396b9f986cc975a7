// The official MCP SDK as a client of hookgate (tests/it/mcp.rs): connects over the transport a
// plan names, carries out its steps in order, and prints one JSON array, each step's result
// or its error, so that the Rust test asserts what a real client saw.
//
//   node client.mjs '{"http": URL, "token": T, "steps": [...]}'
//   node client.mjs '{"stdio": {"command": C, "args": [...], "env": {...}}, "steps": [...]}'
//
// A step is {"listTools": {}}, {"callTool": {"name": N, "arguments": {...}}},
// {"listResources": {}} or {"readResource": {"uri": U}}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const plan = JSON.parse(process.argv[2]);
const transport = plan.http
  ? new StreamableHTTPClientTransport(new URL(plan.http), {
      requestInit: { headers: { Authorization: `Bearer ${plan.token}` } },
    })
  : new StdioClientTransport({ ...plan.stdio, stderr: "inherit" });
const client = new Client({ name: "hookgate-test", version: "0.1.0" });
const results = [];
try {
  await client.connect(transport);
  results.push({ connected: client.getServerVersion(), instructions: client.getInstructions() });
} catch (error) {
  results.push({ error: String(error.message ?? error) });
  console.log(JSON.stringify(results));
  process.exit(0);
}
for (const step of plan.steps) {
  try {
    if (step.listTools) results.push(await client.listTools());
    else if (step.callTool) results.push(await client.callTool(step.callTool));
    else if (step.listResources) results.push(await client.listResources());
    else if (step.readResource) results.push(await client.readResource(step.readResource));
    else results.push({ error: `unknown step ${JSON.stringify(step)}` });
  } catch (error) {
    results.push({ error: String(error.message ?? error) });
  }
}
await client.close();
console.log(JSON.stringify(results));
