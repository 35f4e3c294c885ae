/**
 * The host and origin rules against DNS rebinding, on every route: without tokens only a loopback `Host` on
 * the listening port (or a name of `AGENT_ALLOWED_HOSTS`) is served; a request that changes something from a
 * page of another origin is refused with or without tokens. Through the real handler, and through a real
 * loopback server with raw requests (fetch cannot set `Host`).
 */
import assert from "node:assert/strict";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { loadConfig } from "../src/config.ts";
import { ConfigError } from "../src/errors.ts";
import type { HandlerDeps } from "../src/http/deps.ts";
import { createHandler } from "../src/http/handler.ts";
import { createRoutes } from "../src/http/routes.ts";
import { httpHarness, postMessage, withServer } from "./_http_harness.ts";

const PORT = 8787;
const TOKEN = "tok-host-guard-0123456789";
const ATTACKER = "attacker.example:8787";

/** Every route of the table as a request to `host`, its parameters filled in, with `headers`. */
function everyRoute(deps: HandlerDeps, host: string, headers: Record<string, string> = {}): Request[] {
  const values: Record<string, string> = { id: "s1", file: "app.js", model: "mini-agent" };
  return createRoutes(deps).map((route) => {
    const path = route.path.replace(/\{(\w+)\}/g, (_, name: string) => values[name]);
    const body = route.method === "POST"
      ? JSON.stringify(
        path.endsWith("completions")
          ? { model: "mini-agent", messages: [{ role: "user", content: "hi" }] }
          : path.endsWith("approvals")
          ? { decisions: { call_1: "approve" } }
          : { message: "what is 2+3?" },
      )
      : undefined;
    const type: Record<string, string> = body === undefined ? {} : { "content-type": "application/json" };
    return new Request(`http://${host}${path}`, {
      method: route.method,
      headers: { ...type, ...headers },
      body,
    });
  });
}

async function errorOf(response: Response): Promise<{ status: number; code: string; message: string }> {
  const body = await response.json();
  const error = body.error;
  return { status: response.status, code: error.code, message: error.message };
}

Deno.test("without tokens, every route refuses a Host that is not loopback on the listening port with a 403 saying why, and changes nothing", async () => {
  using h = httpHarness();
  h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } });
  const handler = createHandler({ ...h.deps, hosts: { port: PORT } });
  // A turn waiting on an `ask` call, started by the user on a name the handler allows.
  const own = createHandler({ ...h.deps, hosts: { port: PORT, allowed: ["agent.test"] } });
  const waiting = await (await own(postMessage("s1", { message: "what is 2+3?" }))).json();
  assert.equal(waiting.outcome, "awaiting_approval");
  const calls = h.llm.calls;
  const before = await h.store.messages({ userId: "local", sessionId: "s1" });

  for (
    const host of [
      ATTACKER,
      "attacker.example",
      `127.0.0.1:${PORT + 1}`,
      `localhost:${PORT + 1}`,
      "127.0.0.1",
    ]
  ) {
    for (const request of everyRoute(h.deps, host, { origin: `http://${host}` })) {
      const { method } = request;
      const path = new URL(request.url).pathname;
      const refused = await errorOf(await handler(request));
      assert.equal(refused.status, 403, `${method} ${path} with Host ${host}`);
      assert.equal(refused.code, "host_not_allowed", `${method} ${path}`);
      assert.equal(
        refused.message,
        `Host ${JSON.stringify(host)} is not served: without API tokens this server answers only ` +
          `127.0.0.1:${PORT}, localhost:${PORT} or [::1]:${PORT} (a page of another site can reach loopback by` +
          " DNS rebinding); for a proxy in front, add its name to AGENT_ALLOWED_HOSTS",
      );
    }
  }
  // Nothing ran or changed: no model call, no session, the call still waits.
  assert.equal(h.llm.calls, calls);
  assert.deepEqual(await h.store.messages({ userId: "local", sessionId: "s1" }), before);
  assert.notEqual(await h.store.pendingStep({ userId: "local", sessionId: "s1" }), null);
  assert.deepEqual((await h.store.listSessions("local")).map((s) => s.id), ["s1"]);
});

Deno.test("without tokens, every route serves 127.0.0.1, localhost and [::1] on the listening port, and same-origin writes", async () => {
  using h = httpHarness();
  const handler = createHandler({ ...h.deps, hosts: { port: PORT } });
  for (const host of [`127.0.0.1:${PORT}`, `localhost:${PORT}`, `LOCALHOST:${PORT}`, `[::1]:${PORT}`]) {
    for (const request of everyRoute(h.deps, host, { origin: `http://${host.toLowerCase()}` })) {
      const response = await handler(request);
      const path = new URL(request.url).pathname;
      assert.notEqual(
        response.status,
        403,
        `${request.method} ${path} with Host ${host}: ${response.status}`,
      );
      await response.body?.cancel();
    }
  }
  // The turns ran: the session answered.
  const messages = await h.store.messages({ userId: "local", sessionId: "s1" });
  assert.ok(messages.some((m) => m.role === "assistant" && m.content === "The answer is 5."));
});

Deno.test("with or without tokens, every route that changes something refuses another origin's page; reads are not refused for it", async () => {
  for (const tokens of [[], [{ token: TOKEN, userId: "alice" }]]) {
    using h = httpHarness({ tokens });
    const handler = createHandler({ ...h.deps, hosts: { port: PORT } });
    const auth: Record<string, string> = tokens.length > 0 ? { authorization: `Bearer ${TOKEN}` } : {};
    const host = `127.0.0.1:${PORT}`;
    for (
      const origin of ["http://attacker.example:8787", `https://127.0.0.1:${PORT + 1}`, "null", "garbage"]
    ) {
      for (const request of everyRoute(h.deps, host, { ...auth, origin })) {
        const response = await handler(request);
        const path = new URL(request.url).pathname;
        if (request.method === "GET") {
          assert.notEqual(response.status, 403, `GET ${path} from ${origin}`);
          await response.body?.cancel();
          continue;
        }
        const refused = await errorOf(response);
        assert.equal(
          refused.status,
          403,
          `${request.method} ${path} from ${origin} (tokens: ${tokens.length})`,
        );
        assert.equal(refused.code, "origin_not_allowed");
        assert.equal(
          refused.message,
          `Origin ${JSON.stringify(origin)} may not change anything here: only this server's own page ` +
            `(${JSON.stringify(host)}) may send ${request.method} requests from a browser`,
        );
      }
    }
    assert.deepEqual(await h.store.listSessions(tokens.length > 0 ? "alice" : "local"), []);
    assert.equal(h.llm.calls, 0);
  }
});

Deno.test("with tokens, any Host is served to a caller with a token (the token is the guard)", async () => {
  using h = httpHarness({ tokens: [{ token: TOKEN, userId: "alice" }] });
  const handler = createHandler({ ...h.deps, hosts: { port: PORT } });
  const auth = { authorization: `Bearer ${TOKEN}` };
  for (const request of everyRoute(h.deps, ATTACKER, { ...auth, origin: `http://${ATTACKER}` })) {
    const response = await handler(request);
    assert.notEqual(response.status, 403, `${request.method} ${new URL(request.url).pathname}`);
    await response.body?.cancel();
  }
  const refused = await handler(new Request(`http://${ATTACKER}/v1/sessions`));
  assert.equal(refused.status, 401, "still no answer without the token");
  await refused.body?.cancel();
});

Deno.test("AGENT_ALLOWED_HOSTS: names with any port or one port, lowercased; a bad entry is a clear error", () => {
  const config = loadConfig({ AGENT_ALLOWED_HOSTS: " Agent.Example.com , proxy.internal:8443,[::2]:81" });
  assert.deepEqual(config.allowedHosts, ["agent.example.com", "proxy.internal:8443", "[::2]:81"]);
  assert.deepEqual(loadConfig({}).allowedHosts, []);
  for (const [raw, entry] of [["a b", "a b"], ["ok.example,", ""], ["x/y", "x/y"], ["h:99999", "h:99999"]]) {
    assert.throws(() => loadConfig({ AGENT_ALLOWED_HOSTS: raw }), (error: unknown) => {
      assert.ok(error instanceof ConfigError);
      const index = raw.split(",").findIndex((part) => part.trim() === entry) + 1;
      assert.equal(
        error.message,
        `Invalid AGENT_ALLOWED_HOSTS=${JSON.stringify(raw)}: entry ${index} (${
          JSON.stringify(entry)
        }) is not a host name[:port]`,
      );
      return true;
    });
  }
});

Deno.test("AGENT_ALLOWED_HOSTS: a proxy's names are served without tokens, and its pages' origins may write", async () => {
  using h = httpHarness();
  const handler = createHandler({
    ...h.deps,
    hosts: { port: PORT, allowed: ["agent.example.com", "proxy.internal:8443"] },
  });
  const served = async (host: string, headers: Record<string, string> = {}) => {
    const response = await handler(new Request(`http://${host}/healthz`, { headers }));
    await response.body?.cancel();
    return response.status;
  };
  assert.equal(await served("agent.example.com"), 200);
  assert.equal(await served("agent.example.com:8080"), 200);
  assert.equal(await served("proxy.internal:8443"), 200);
  assert.equal(await served("proxy.internal:9000"), 403);
  assert.equal(await served("other.example.com"), 403);
  const post = (host: string, origin: string, session: string) =>
    handler(
      new Request(`http://${host}/v1/sessions/${session}/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", origin },
        body: JSON.stringify({ message: "hello" }),
      }),
    );
  // A proxy that forwards its own Host: the page of https://agent.example.com posts to it.
  const fromProxy = new Request(`http://agent.example.com/v1/sessions/p1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: "https://agent.example.com" },
    body: JSON.stringify({ message: "hello" }),
  });
  const answered = await handler(fromProxy);
  assert.equal(answered.status, 200);
  await answered.body?.cancel();
  // A proxy that rewrites Host to the loopback address: the allowed name's page may still write.
  const rewritten = new Request(`http://127.0.0.1:${PORT}/v1/sessions/p2/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", origin: "https://agent.example.com" },
    body: JSON.stringify({ message: "hello" }),
  });
  const also = await handler(rewritten);
  assert.equal(also.status, 200);
  await also.body?.cancel();
  const evil = await post(`127.0.0.1:${PORT}`, "https://evil.example.com", "p3");
  assert.equal(evil.status, 403);
  assert.equal((await evil.json()).error.code, "origin_not_allowed");
  assert.deepEqual((await h.store.listSessions("local")).map((s) => s.id).sort(), ["p1", "p2"]);
});

/** One raw HTTP/1.1 request to the server at `port` (fetch cannot set `Host`): its status and body. */
async function raw(port: number, head: string, body = ""): Promise<{ status: number; body: string }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    const length = new TextEncoder().encode(body).length;
    const request = `${head}\r\nConnection: close\r\nContent-Length: ${length}\r\n\r\n${body}`;
    await conn.write(new TextEncoder().encode(request));
    const text = new TextDecoder().decode(await new Response(conn.readable).arrayBuffer());
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1]);
    return { status, body: text.slice(text.indexOf("\r\n\r\n") + 4) };
  } catch (error) {
    conn.close();
    throw error;
  }
}

Deno.test("a real server: the rebinding requests of the report are refused, the same requests on its loopback name are served", async () => {
  using h = httpHarness();
  await withServer(h, async ({ server }) => {
    const { port } = server;
    const message = JSON.stringify({ message: "what is 2+3?" });
    const json = "Content-Type: application/json";
    const attack = await raw(
      port,
      `POST /v1/sessions/r1/messages HTTP/1.1\r\nHost: ${ATTACKER}\r\nOrigin: http://${ATTACKER}\r\n${json}`,
      message,
    );
    assert.equal(attack.status, 403);
    assert.equal(JSON.parse(attack.body).error.code, "host_not_allowed");
    // The request line's authority counts too: absolute form naming loopback, Host naming the attacker.
    const absolute = await raw(
      port,
      `GET http://127.0.0.1:${port}/v1/sessions HTTP/1.1\r\nHost: ${ATTACKER}`,
    );
    assert.equal(absolute.status, 403);
    const page = await raw(port, `GET / HTTP/1.1\r\nHost: ${ATTACKER}`);
    assert.equal(page.status, 403);
    assert.deepEqual(await h.store.listSessions("local"), []);
    // The listening port counts: the same loopback name on the port the attacker's page was loaded from.
    const otherPort = await raw(
      port,
      `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${port === 8787 ? 8788 : 8787}`,
    );
    assert.equal(otherPort.status, 403);
    const own = await raw(
      port,
      `POST /v1/sessions/r1/messages HTTP/1.1\r\nHost: localhost:${port}\r\nOrigin: http://localhost:${port}\r\n${json}`,
      message,
    );
    assert.equal(own.status, 200, own.body);
    assert.equal(JSON.parse(own.body).answer, "The answer is 5.");
    const noHost = await raw(port, `GET /healthz HTTP/1.0`);
    assert.equal(noHost.status, 200, "an HTTP/1.0 request without Host names the listener");
  }, { overrides: { hosts: {} } });
});
