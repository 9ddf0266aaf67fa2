// An MCP server on the TypeScript SDK 1.x (`@modelcontextprotocol/sdk`, pinned in package.json),
// the most deployed server SDK, with tools that stop waiting for their elicitation the ways real
// servers do. Legacy era only (the SDK 1.x answers `server/discover` with -32601).
//
//   node withdrawing_server.mjs <node_modules dir> [--timeout-ms N] [--http PORT]
//
// Tools (each asks for a delivery address under `_meta["m3/request_key"] = "shipping_address"`):
// - `ask_with_timeout`: `elicitInput` with the SDK's own request timeout (`--timeout-ms`, default
//   the SDK's 60 s). On timeout the SDK sends `notifications/cancelled` for the request and the
//   tool returns a result saying no answer came.
// - `ask_then_exit`: asks, then the process exits while the request is open.
// - `ask_without_waiting`: asks, and completes the call at once without waiting for the answer.
//
// Transport: stdio by default. With `--http PORT`, Streamable HTTP at http://127.0.0.1:PORT/mcp
// (POST, GET, DELETE), stateful as the SDK's examples are: every `initialize` without a session
// id opens a session (a `StreamableHTTPServerTransport` with `sessionIdGenerator: randomUUID` and
// a new `McpServer` with the same tools), answers come as SSE, DELETE ends the session. An unknown
// session id gets 404 `{"code":-32001,"message":"Session not found"}` (as the SDK's own transport
// answers it), a request without one other than `initialize` 400 -32000. The app is the SDK's
// `createMcpExpressApp` (express.json() and Host-header validation for loopback names).
//
// The tools call `server.server.elicitInput(address, options)` WITHOUT `relatedRequestId`, as
// many real servers do, so over HTTP the SDK does not tie the `elicitation/create` to the
// `tools/call`: it travels on the session's standalone GET SSE stream (with no GET stream open
// it is dropped), as does `ask_with_timeout`'s `notifications/cancelled` on timeout; the answer
// comes back as a POST, and the tool's result ends the `tools/call`'s own POST SSE stream.
import { pathToFileURL } from "node:url";
import path from "node:path";
import { randomUUID } from "node:crypto";

const [modules, ...rest] = process.argv.slice(2);
if (!modules) {
  console.error("usage: withdrawing_server.mjs <node_modules dir> [--timeout-ms N] [--http PORT]");
  process.exit(2);
}
const flag = rest.indexOf("--timeout-ms");
const timeout = flag >= 0 ? Number(rest[flag + 1]) : undefined;
const httpFlag = rest.indexOf("--http");
const httpPort = httpFlag >= 0 ? Number(rest[httpFlag + 1]) : undefined;

const load = (file) =>
  import(pathToFileURL(path.join(modules, "@modelcontextprotocol/sdk/dist/esm", file)).href);
const { McpServer } = await load("server/mcp.js");

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

// One server with the tools: the only one over stdio, one per session over HTTP.
function makeServer() {
  const server = new McpServer({ name: "withdrawing", version: "1.0.0" });

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

  return server;
}

if (httpPort === undefined) {
  const { StdioServerTransport } = await load("server/stdio.js");
  await makeServer().connect(new StdioServerTransport());
} else {
  const { StreamableHTTPServerTransport } = await load("server/streamableHttp.js");
  const { createMcpExpressApp } = await load("server/express.js");
  const { isInitializeRequest } = await load("types.js");

  const sessions = new Map(); // session id -> its transport
  const refuse = (res, status, code, message) =>
    res.status(status).json({ jsonrpc: "2.0", error: { code, message }, id: null });

  const app = createMcpExpressApp({ host: "127.0.0.1" });

  app.post("/mcp", async (req, res) => {
    const sid = req.headers["mcp-session-id"];
    let transport = sid === undefined ? undefined : sessions.get(sid);
    if (transport === undefined) {
      if (sid !== undefined) return refuse(res, 404, -32001, "Session not found");
      if (!isInitializeRequest(req.body)) {
        return refuse(res, 400, -32000, "Bad Request: Server not initialized");
      }
      // A new session: its transport is registered once the SDK has minted the id.
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => sessions.set(id, transport),
        onsessionclosed: (id) => sessions.delete(id),
      });
      transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
      await makeServer().connect(transport);
    }
    await transport.handleRequest(req, res, req.body);
  });

  // GET (the standalone SSE stream) and DELETE (end the session) need a known session.
  const inSession = async (req, res) => {
    const sid = req.headers["mcp-session-id"];
    if (sid === undefined) {
      return refuse(res, 400, -32000, "Bad Request: Mcp-Session-Id header is required");
    }
    const transport = sessions.get(sid);
    if (transport === undefined) return refuse(res, 404, -32001, "Session not found");
    await transport.handleRequest(req, res);
  };
  app.get("/mcp", inSession);
  app.delete("/mcp", inSession);

  app.listen(httpPort, "127.0.0.1", (error) => {
    if (error) {
      console.error(`cannot listen on 127.0.0.1:${httpPort}: ${error.message}`);
      process.exit(1);
    }
    console.error(`listening on http://127.0.0.1:${httpPort}/mcp`);
  });
}
