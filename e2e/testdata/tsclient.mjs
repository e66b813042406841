// tsclient.mjs: the official MCP TypeScript SDK (@modelcontextprotocol/sdk)
// against an idem gateway in front of @modelcontextprotocol/server-memory.
// It lists the tools, makes keyed calls (the key as the flat idempotencyKey
// argument and in _meta), repeats them, reads the graph and reuses a key
// with other arguments, then prints what it saw as one JSON object. The
// gateway's --contracts declares create_entities and add_observations
// same_key_replay (docs/gateway.md).
//
//   IDEM_URL=http://127.0.0.1:8082 IDEM_TOKEN=my-agent-token node tsclient.mjs
//
// IDEM_TOOL_PREFIX names server-memory's tools when the gateway serves
// them under its upstream's name (idem gateway --config: "memory."); the
// tools are printed under their names without it, and only those.
//
// It needs @modelcontextprotocol/sdk in a node_modules beside it
// (npm install @modelcontextprotocol/sdk@1.32.2). TestGatewayTypeScriptSDK
// (e2e/gateway_sdk_test.go) runs it and asserts on its output.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL("/mcp", process.env.IDEM_URL ?? "http://127.0.0.1:8082");
const token = process.env.IDEM_TOKEN ?? "my-agent-token";
const prefix = process.env.IDEM_TOOL_PREFIX ?? "";

const client = new Client({ name: "tsclient", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(url, {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);

const out = { protocolVersion: transport.protocolVersion, tools: {} };
const { tools } = await client.listTools();
for (const t of tools) {
  if (!t.name.startsWith(prefix)) continue;
  out.tools[t.name.slice(prefix.length)] = {
    annotations: t.annotations,
    idempotencyKey: t.inputSchema?.properties?.idempotencyKey ?? null,
    required: t.inputSchema?.required ?? [],
  };
}

const bellows = { entities: [{ name: "bellows", entityType: "tool", observations: ["leather"] }] };
const key = "ts-bellows";

// The key as the flat argument, then the same call again (a retry after a
// lost answer), then the same key in _meta: one execution, one answer.
out.first = await client.callTool({ name: prefix + "create_entities", arguments: { ...bellows, idempotencyKey: key } });
out.retry = await client.callTool({ name: prefix + "create_entities", arguments: { ...bellows, idempotencyKey: key } });
out.retryMeta = await client.callTool({ name: prefix + "create_entities", arguments: bellows, _meta: { idempotencyKey: key } });

// A first call with the key in _meta, and its retry.
const obs = { observations: [{ entityName: "bellows", contents: ["pumped"] }] };
const obsKey = "ts-pumped";
out.observe = await client.callTool({ name: prefix + "add_observations", arguments: obs, _meta: { idempotencyKey: obsKey } });
out.observeRetry = await client.callTool({ name: prefix + "add_observations", arguments: obs, _meta: { idempotencyKey: obsKey } });

// The graph, read through the upstream's own tool: bellows once, with
// "pumped" once.
out.graph = (await client.callTool({ name: prefix + "read_graph", arguments: {} })).structuredContent;

// The key again, for another intent.
out.reuse = await client.callTool({
  name: prefix + "create_entities",
  arguments: { entities: [{ name: "hammer", entityType: "tool", observations: [] }], idempotencyKey: key },
});

await client.close();
console.log(JSON.stringify(out));
