// tssampling.mjs: the official MCP TypeScript SDK (@modelcontextprotocol/sdk)
// as a client that declares sampling, against an idem gateway in front of
// @modelcontextprotocol/server-everything. It calls
// trigger-sampling-request, answers the sampling request the upstream sends
// through the gateway, and prints the tool's result and the prompt it was
// asked as one JSON object. TestGatewaySamplingAndElicitation
// (e2e/gateway_relay_test.go) runs it.
//
//   IDEM_URL=http://127.0.0.1:8082 IDEM_TOKEN=my-agent-token node tssampling.mjs
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const url = new URL("/mcp", process.env.IDEM_URL ?? "http://127.0.0.1:8082");
const token = process.env.IDEM_TOKEN ?? "my-agent-token";

const client = new Client({ name: "tssampling", version: "1.0.0" }, { capabilities: { sampling: {} } });
const asked = [];
client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  asked.push(req.params.messages[0].content.text);
  return { role: "assistant", model: "ts-model", content: { type: "text", text: "the TypeScript client's answer" } };
});
const transport = new StreamableHTTPClientTransport(url, {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const result = await client.callTool({ name: "trigger-sampling-request", arguments: { prompt: "from TypeScript", maxTokens: 5 } });
console.log(JSON.stringify({ protocolVersion: transport.protocolVersion, asked, result }));
await client.close();
