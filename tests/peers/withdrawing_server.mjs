// An MCP server on the TypeScript SDK 1.x (`@modelcontextprotocol/sdk`, pinned in package.json),
// the most deployed server SDK, with tools that stop waiting for their elicitation the ways real
// servers do. Legacy era only (the SDK 1.x answers `server/discover` with -32601).
//
//   node withdrawing_server.mjs <node_modules dir> [--timeout-ms N]
//
// Tools (each asks for a delivery address under `_meta["m3/request_key"] = "shipping_address"`):
// - `ask_with_timeout`: `elicitInput` with the SDK's own request timeout (`--timeout-ms`, default
//   the SDK's 60 s). On timeout the SDK sends `notifications/cancelled` for the request and the
//   tool returns a result saying no answer came.
// - `ask_then_exit`: asks, then the process exits while the request is open.
// - `ask_without_waiting`: asks, and completes the call at once without waiting for the answer.
import { pathToFileURL } from "node:url";
import path from "node:path";

const [modules, ...rest] = process.argv.slice(2);
if (!modules) {
  console.error("usage: withdrawing_server.mjs <node_modules dir> [--timeout-ms N]");
  process.exit(2);
}
const flag = rest.indexOf("--timeout-ms");
const timeout = flag >= 0 ? Number(rest[flag + 1]) : undefined;

const load = (file) =>
  import(pathToFileURL(path.join(modules, "@modelcontextprotocol/sdk/dist/esm", file)).href);
const { McpServer } = await load("server/mcp.js");
const { StdioServerTransport } = await load("server/stdio.js");

const server = new McpServer({ name: "withdrawing", version: "1.0.0" });

const address = {
  message: "Where should the shipment be delivered?",
  requestedSchema: {
    type: "object",
    properties: {
      street: { type: "string", title: "Street", minLength: 1 },
      city: { type: "string", title: "City", minLength: 1 },
    },
    required: ["street", "city"],
  },
  _meta: { "m3/request_key": "shipping_address" },
};

const text = (t) => ({ content: [{ type: "text", text: t }] });

server.registerTool(
  "ask_with_timeout",
  { description: "Asks for the delivery address; gives up after the SDK's request timeout." },
  async () => {
    try {
      const options = timeout === undefined ? undefined : { timeout };
      const answer = await server.server.elicitInput(address, options);
      if (answer.action !== "accept") return text(`not booked: ${answer.action}`);
      return text(`Booked shipment to ${answer.content.street}, ${answer.content.city}`);
    } catch (error) {
      return text(`no answer: ${error.message}`);
    }
  },
);

server.registerTool(
  "ask_then_exit",
  { description: "Asks for the delivery address, then exits while the request is open." },
  async () => {
    server.server.elicitInput(address).catch(() => {});
    setTimeout(() => process.exit(3), 300);
    return new Promise(() => {});
  },
);

server.registerTool(
  "ask_without_waiting",
  { description: "Asks for the delivery address and completes at once without the answer." },
  async () => {
    server.server.elicitInput(address).catch(() => {});
    return text("booked without waiting for the address");
  },
);

await server.connect(new StdioServerTransport());
