/**
 * McpConnection.close() over Streamable HTTP leaves nothing running: not the SDK's next try of a lost server
 * stream, not a background try of a server that failed to start. The server is a fetch function, so each test
 * decides when a request answers; the sanitizers catch a timer or a request left behind.
 */
import assert from "node:assert/strict";
import { McpConnection } from "../src/mcp/connection.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { until } from "./_http_harness.ts";

const sdk = await loadMcpSdk();

/** How the fake server answers what a test controls; the rest (listing, calls, notifications) it answers itself. */
interface FakeServerOptions {
  /** Answers the `n`-th initialize request (1 is the first). @default {a session} */
  initialize?: (n: number, signal: AbortSignal) => Promise<Response> | undefined;
  /** Answers the `n`-th GET, the server's own stream (1 is the first). @default {405} */
  get?: (n: number, signal: AbortSignal) => Promise<Response>;
  /** The SSE `retry` field (milliseconds) sent before a tool call's result. @default {undefined} */
  callRetryMs?: number;
}

/** A Streamable HTTP MCP server with one tool, `echo`, as a fetch function. */
function fakeServer(options: FakeServerOptions = {}): typeof fetch {
  const { initialize = () => undefined, get = () => Promise.resolve(new Response(null, { status: 405 })) } =
    options;
  let initializes = 0;
  let gets = 0;
  return async (input, init) => {
    const request = new Request(input, init);
    if (request.method === "GET") return await get(++gets, request.signal);
    const message = await request.json();
    if (message.id === undefined) return new Response(null, { status: 202 });
    const result = (value: unknown) => ({ jsonrpc: "2.0", id: message.id, result: value });
    switch (message.method) {
      case "initialize": {
        const answer = initialize(++initializes, request.signal);
        if (answer !== undefined) return await answer;
        return Response.json(
          result({
            protocolVersion: message.params.protocolVersion,
            capabilities: { tools: {} },
            serverInfo: { name: "fake", version: "1" },
          }),
          { headers: { "mcp-session-id": "session-1" } },
        );
      }
      case "tools/list":
        return Response.json(result({ tools: [{ name: "echo", inputSchema: { type: "object" } }] }));
      case "tools/call": {
        const retry = options.callRetryMs === undefined ? "" : `retry: ${options.callRetryMs}\n\n`;
        const data = JSON.stringify(result({ content: [{ type: "text", text: "echoed" }] }));
        return new Response(`${retry}event: message\ndata: ${data}\n\n`, {
          headers: { "content-type": "text/event-stream" },
        });
      }
      default:
        return Response.json({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: "no" } });
    }
  };
}

/** A request that never answers: it fails when its signal aborts, as fetch does. */
function hanging(signal: AbortSignal): Promise<Response> {
  return new Promise((_, reject) => {
    if (signal.aborted) return reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

/** A promise and the function that resolves it. */
function signalled(): { promise: Promise<void>; resolve: () => void } {
  const { promise, resolve } = Promise.withResolvers<void>();
  return { promise, resolve: () => resolve() };
}

const config = { name: "web", transport: "http" as const, url: "http://mcp.test/mcp", headers: {} };

Deno.test("McpConnection.close() while the SDK tries a lost server stream again leaves no try for later", async () => {
  const reconnecting = signalled();
  const connection = new McpConnection(config, {
    sdk,
    timeoutMs: 20_000,
    fetch: fakeServer({
      get: (n, signal) => {
        // The first stream ends at once, asking for its next try within 1 ms; that try hangs.
        if (n === 1) {
          return Promise.resolve(
            new Response("retry: 1\n\n", { headers: { "content-type": "text/event-stream" } }),
          );
        }
        reconnecting.resolve();
        return hanging(signal);
      },
      // The tool call's answer makes any later try wait a minute: one set after close would outlive the test.
      callRetryMs: 60_000,
    }),
  });
  assert.equal(await connection.start(), true);
  await reconnecting.promise;
  const result = await connection.call("echo", {});
  assert.deepEqual(result.content, [{ type: "text", text: "echoed" }]);
  await connection.close();
  assert.equal(connection.health().state, "closed");
});

Deno.test("McpConnection.close() during a background try of a server that failed to start ends that try and waits for it", async () => {
  let retrying = false;
  const warnings: string[] = [];
  const connection = new McpConnection(config, {
    sdk,
    timeoutMs: 20_000,
    startTimeoutMs: 60_000,
    retry: { minTimeout: 1, multiplier: 1, maxTimeout: 1 },
    warn: (line) => warnings.push(line),
    fetch: fakeServer({
      initialize: (n, signal) => {
        if (n === 1) return Promise.resolve(new Response("starting up", { status: 503 }));
        // The background try hangs: only close() ends it before the start deadline.
        retrying = true;
        return hanging(signal);
      },
    }),
  });
  assert.equal(await connection.start(), false);
  assert.equal(connection.health().state, "failed");
  // Polled: the retry timer does not keep the event loop alive on its own.
  await until(() => retrying, "the background try");
  await connection.close();
  assert.equal(connection.health().state, "closed");
  assert.equal(warnings.length, 1, warnings.join("\n"));
});
