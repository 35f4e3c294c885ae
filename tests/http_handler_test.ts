/** The HTTP handler called directly with `new Request(...)`: every route and every error. */
import assert from "node:assert/strict";
import { LlmError } from "../src/errors.ts";
import { REQUEST_LINE } from "../src/http/handler.ts";
import { OPENAPI } from "../src/http/openapi.ts";
import { createRoutes } from "../src/http/routes.ts";
import { readTrace } from "../src/trace/trace.ts";
import { keyOf } from "./_harness.ts";
import { httpHarness, parseSse, postMessage, until } from "./_http_harness.ts";

const TOKENS = [{ token: "tok-alice-0123456789", userId: "alice" }, {
  token: "tok-bob-9876543210",
  userId: "bob",
}];
const as = (token: string) => ({ authorization: `Bearer ${token}` });
const get = (path: string, headers: Record<string, string> = {}, method = "GET") =>
  new Request(`http://agent.test${path}`, { method, headers });

Deno.test("POST /v1/sessions/{id}/messages runs a turn and answers with its result", async () => {
  using h = httpHarness();
  const response = await h.handler(postMessage("web-1", { message: "what is 12*7?" }));
  assert.equal(response.status, 200);
  const body = await response.json();
  assert.equal(body.session_id, "web-1");
  assert.equal(body.turn, 1);
  assert.equal(body.outcome, "answered");
  assert.equal(body.answer, "The answer is 84.");
  assert.deepEqual(body.tool_calls, [{ name: "calculator", arguments: '{"expression":"12*7"}', ok: true }]);
  assert.deepEqual(body.usage, { prompt_tokens: 20, completion_tokens: 4, total_tokens: 24 });
  assert.equal(typeof body.run_id, "string");
  const trace = readTrace(h.tracePath);
  assert.ok(trace.every((e) => e.run_id === body.run_id));
  assert.deepEqual(trace.map((e) => e.event).at(-1), "run_end");
});

Deno.test("GET /healthz answers without auth and without secrets", async () => {
  using h = httpHarness({ tokens: TOKENS });
  const response = await h.handler(get("/healthz"));
  assert.equal(response.status, 200);
  const text = await response.text();
  assert.deepEqual(JSON.parse(text), { ok: true, model: "rule", db: "ok" });
  assert.ok(!text.includes("tok-"));
});

Deno.test("GET /openapi.json describes every route the router serves", async () => {
  using h = httpHarness();
  const response = await h.handler(get("/openapi.json"));
  const doc = await response.json();
  assert.equal(doc.openapi, "3.1.0");
  const routes = createRoutes(h.deps);
  assert.ok(routes.length >= 8);
  for (const route of routes) {
    const path = (OPENAPI.paths as Record<string, Record<string, { security?: unknown[] }>>)[route.path];
    assert.ok(path !== undefined, `${route.path} is not described`);
    const operation = path[route.method.toLowerCase()];
    assert.ok(operation !== undefined, `${route.method} ${route.path} is not described`);
    // The route's one auth declaration is what the document says of it.
    const open = Array.isArray(operation.security) && operation.security.length === 0;
    assert.equal(open, route.auth === "none", `${route.method} ${route.path}: auth ${route.auth}`);
  }
  const described = Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.keys(item as object).filter((k) => k !== "parameters").map((m) => `${m.toUpperCase()} ${path}`)
  );
  // HEAD is served wherever GET is.
  const served = routes.flatMap((r) =>
    r.method === "GET" ? ["GET", "HEAD"].map((m) => `${m} ${r.path}`) : [`${r.method} ${r.path}`]
  );
  assert.deepEqual(described.sort(), served.sort(), "and nothing else");
});

Deno.test("bad bodies get 400/413/415 with a JSON error, and change nothing in the database", async () => {
  using h = httpHarness({ maxBodyBytes: 100 });
  const cases: [Request, number, string][] = [
    [postMessage("s", "{not json"), 400, "invalid_json"],
    [postMessage("s", { text: "hi" }), 400, "invalid_body"],
    [postMessage("s", { message: 42 }), 400, "invalid_body"],
    [postMessage("s", { message: "   " }), 400, "invalid_body"],
    [postMessage("bad%20id", { message: "hi" }), 400, "invalid_session_id"],
    [postMessage("s", { message: "x".repeat(200) }), 413, "payload_too_large"],
    [postMessage("s", "message=hi", { "content-type": "text/plain" }), 415, "unsupported_media_type"],
  ];
  for (const [request, status, code] of cases) {
    const response = await h.handler(request);
    assert.equal(response.status, status, code);
    const body = await response.json();
    assert.equal(body.error.code, code);
    assert.equal(typeof body.error.message, "string");
  }
  assert.deepEqual(await h.store.listSessions("local"), []);
  assert.equal(h.llm.calls, 0);
});

Deno.test("unknown routes are 404 and wrong methods 405 with Allow", async () => {
  using h = httpHarness();
  const missing = await h.handler(get("/v2/nothing"));
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).error.code, "not_found");
  const wrong = await h.handler(get("/v1/sessions/s/messages"));
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.get("allow"), "POST");
  await wrong.body?.cancel();
  const put = await h.handler(get("/v1/sessions/s", {}, "PUT"));
  assert.equal(put.status, 405);
  assert.equal(put.headers.get("allow"), "GET, HEAD, PATCH, DELETE");
  await put.body?.cancel();
});

Deno.test("the handler logs one line per request in REQUEST_LINE's shape, and an unexpected error in another", async () => {
  using h = httpHarness();
  for (const path of ["/healthz", "/nope"]) await (await h.handler(get(path))).body?.cancel();
  await h.store.close(); // the next request fails inside the route: a logged 500
  const broken = await h.handler(get("/v1/sessions"));
  assert.equal(broken.status, 500);
  await broken.body?.cancel();
  const requests = h.logs.filter((line) => REQUEST_LINE.test(line));
  assert.deepEqual(requests.map((line) => line.replace(/ \d+ms$/, "")), [
    "GET /healthz 200",
    "GET /nope 404",
    "GET /v1/sessions 500",
  ]);
  const others = h.logs.filter((line) => !REQUEST_LINE.test(line));
  assert.equal(others.length, 1, h.logs.join("\n"));
  assert.match(others[0], /^error: /);
});

Deno.test("with API tokens every /v1 route needs a known bearer token", async () => {
  using h = httpHarness({ tokens: TOKENS });
  const attempts: Record<string, string>[] = [
    {},
    { authorization: "Bearer nope" },
    { authorization: "Basic dG9rLWFsaWNl" },
  ];
  for (const headers of attempts) {
    const response = await h.handler(postMessage("s", { message: "hi" }, headers));
    assert.equal(response.status, 401);
    assert.equal(response.headers.get("www-authenticate"), "Bearer");
    const text = await response.text();
    assert.ok(!text.includes("nope"), "the presented token is never echoed");
    const list = await h.handler(get("/v1/sessions", headers));
    assert.equal(list.status, 401);
    await list.body?.cancel();
  }
  assert.deepEqual(await h.store.listSessions("alice"), []);
  const ok = await h.handler(postMessage("s", { message: "hi" }, as(TOKENS[0].token)));
  assert.equal(ok.status, 200);
  assert.equal((await h.store.get(keyOf("s", "alice")))!.userId, "alice");
  assert.ok(!h.logs.join("\n").includes("tok-"), "tokens never reach the log");
  await ok.body?.cancel();
});

Deno.test("GET routes show the session, its todos and its trace; DELETE removes all but the trace", async () => {
  using h = httpHarness();
  for (const message of ["what is 6*7?", "hello"]) {
    const response = await h.handler(postMessage("s1", { message }));
    await response.body?.cancel();
  }
  await h.store.addTodo(keyOf("s1", "local"), "write the README");
  const sessions = await (await h.handler(get("/v1/sessions"))).json();
  assert.deepEqual(sessions.sessions.map((s: { id: string; turn_count: number }) => [s.id, s.turn_count]), [[
    "s1",
    2,
  ]]);

  const session = await (await h.handler(get("/v1/sessions/s1"))).json();
  assert.equal(session.turn_count, 2);
  assert.equal(session.summary, null);
  assert.deepEqual(session.messages.map((m: { role: string }) => m.role), [
    "user",
    "assistant",
    "tool",
    "assistant",
    "user",
    "assistant",
  ]);
  assert.equal(session.messages[1].tool_calls[0].name, "calculator");
  assert.equal(session.messages[2].tool_call_id, session.messages[1].tool_calls[0].id);

  const todos = await (await h.handler(get("/v1/sessions/s1/todos"))).json();
  assert.deepEqual(todos.todos.map((t: { text: string }) => t.text), ["write the README"]);

  const trace = await (await h.handler(get("/v1/sessions/s1/trace"))).json();
  const runs = [...new Set(trace.events.map((e: { run_id: string }) => e.run_id))] as string[];
  assert.equal(runs.length, 2);
  const one = await (await h.handler(get(`/v1/sessions/s1/trace?run_id=${runs[0]}`))).json();
  assert.ok(one.events.length > 0 && one.events.every((e: { run_id: string }) => e.run_id === runs[0]));

  const deleted = await h.handler(get("/v1/sessions/s1", {}, "DELETE"));
  assert.equal(deleted.status, 204);
  assert.equal(await h.store.get(keyOf("s1", "local")), null);
  assert.deepEqual(await h.store.listTodos(keyOf("s1", "local")), []);
  assert.equal((await h.handler(get("/v1/sessions/s1"))).status, 404);
  assert.ok(readTrace(h.tracePath).some((e) => e.session_id === "s1"), "trace lines stay");
  // A new session under the same id does not see the old one's trace.
  await (await h.handler(postMessage("s1", { message: "fresh start" }))).body?.cancel();
  const fresh = await (await h.handler(get("/v1/sessions/s1/trace"))).json();
  assert.equal(new Set(fresh.events.map((e: { run_id: string }) => e.run_id)).size, 1);
});

Deno.test("a failing model gives 502 and a timing-out one 504, both with the run_id", async () => {
  using h = httpHarness();
  h.llm.fail = new LlmError("LLM request failed: HTTP 500 from api.test: boom (3 attempts)", {
    kind: "http",
    status: 500,
    retries: 2,
  });
  const failed = await h.handler(postMessage("s", { message: "hi" }));
  assert.equal(failed.status, 502);
  const body = await failed.json();
  assert.equal(body.error.code, "llm_error");
  assert.match(body.error.message, /HTTP 500 from api\.test: boom/);
  assert.ok(readTrace(h.tracePath).some((e) => e.run_id === body.error.run_id && e.event === "error"));

  h.llm.fail = new LlmError("LLM request timed out after 60 s (3 attempts)", { kind: "timeout", retries: 2 });
  const timedOut = await h.handler(postMessage("s", { message: "hi" }));
  assert.equal(timedOut.status, 504);
  assert.equal((await timedOut.json()).error.code, "llm_timeout");
});

Deno.test("while shutting down every request gets 503", async () => {
  using h = httpHarness();
  h.setShuttingDown(true);
  const response = await h.handler(postMessage("s", { message: "hi" }));
  assert.equal(response.status, 503);
  assert.equal((await response.json()).error.code, "shutting_down");
  assert.equal(await h.store.get(keyOf("s", "local")), null);
});

Deno.test("a session's queue holds 8 waiting turns; the next one gets 429 with Retry-After", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  const running = Array.from(
    { length: 9 },
    (_, i) => h.handler(postMessage("busy", { message: `turn ${i}` })),
  );
  // The first turn runs and the other eight wait in the queue.
  await until(() => h.deps.sessions.waiting(keyOf("busy", "local")) === 8, "eight turns to queue");
  const rejected = await h.handler(postMessage("busy", { message: "one too many" }));
  assert.equal(rejected.status, 429);
  assert.ok(Number(rejected.headers.get("retry-after")) >= 1);
  await rejected.body?.cancel();
  const other = h.handler(postMessage("other", { message: "different session" }));
  h.llm.release();
  const timer = setInterval(() => h.llm.release(), 5);
  const responses = await Promise.all([...running, other]);
  clearInterval(timer);
  const bodies = await Promise.all(responses.map((r) => r.json()));
  assert.deepEqual(bodies.slice(0, 9).map((b) => b.turn), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
  assert.equal(bodies[9].turn, 1);
  assert.ok(!(await h.store.messages(keyOf("busy", "local"))).some((m) => m.content === "one too many"));
});

Deno.test("Accept: text/event-stream streams the run's events as SSE, the same events the trace holds", async () => {
  using h = httpHarness();
  const response = await h.handler(
    postMessage("sse", { message: "what is 3*4?" }, { accept: "text/event-stream" }),
  );
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type")!, /^text\/event-stream/);
  const frames = parseSse(await response.text());
  assert.deepEqual(frames.map((f) => f.event), [
    "run_start",
    "llm_call",
    "tool_call",
    "tool_result",
    "delta",
    "delta",
    "delta",
    "delta",
    "llm_call",
    "answer",
    "run_end",
  ]);
  const deltas = frames.filter((f) => f.event === "delta").map((f) => f.data.text).join("");
  const answer = frames.find((f) => f.event === "answer")!.data.data as { text: string };
  assert.equal(deltas, "The answer is 12.");
  assert.equal(deltas, answer.text, "the deltas add up to the answer");
  const events = frames.filter((f) => f.event !== "delta");
  assert.ok(events.every((f) => f.data.event === f.event));
  assert.deepEqual(events.map((f) => f.data), readTrace(h.tracePath), "deltas are never traced");
});

Deno.test("with tokens, every route declared auth: user answers 401 without one, and no route declared none does", async () => {
  using h = httpHarness({ tokens: TOKENS });
  const routes = createRoutes(h.deps);
  const concrete = (path: string) =>
    path.replace(/\{(\w+)\}/g, (_, name) => (name === "file" ? "app.js" : "x"));
  for (const route of routes) {
    const path = route.path === "/text/{file}" ? "/text/title.js" : concrete(route.path);
    const response = await h.handler(get(path, { "content-type": "application/json" }, route.method));
    await response.body?.cancel();
    assert.equal(
      response.status === 401,
      route.auth === "user",
      `${route.method} ${path}: ${response.status}`,
    );
  }
});
