/** The paged trace route through the real handler: pages, bounds, users, deletes, other processes, restarts. */
import assert from "node:assert/strict";
import { readTrace } from "../src/trace/trace.ts";
import { decodeTraceCursor, encodeTraceCursor } from "../src/http/trace_route.ts";
import { SharedTrace } from "../src/trace/shared_trace.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import type { RunEvent } from "../src/events.ts";
import { httpHarness, postMessage } from "./_http_harness.ts";
import { keyOf, tempDir } from "./_harness.ts";

const TOKENS = [
  { token: "tok-alice-0123456789", userId: "alice" },
  { token: "tok-bob-9876543210", userId: "bob" },
];
const as = (token: string) => ({ authorization: `Bearer ${token}` });
const get = (path: string, headers: Record<string, string> = {}) =>
  new Request(`http://agent.test${path}`, { headers });

/** A run event as written since events carry `user_id`; `user` null writes one from before that. */
function event(
  user: string | null,
  session: string,
  step: number,
  name = "llm_call",
  run = "r1",
  data: Record<string, unknown> = {},
): RunEvent {
  const e = {
    ts: new Date().toISOString(),
    session_id: session,
    ...(user === null ? {} : { user_id: user }),
    run_id: run,
    turn: 1,
    event: name,
    step,
    data: { pad: "p".repeat(40), ...data },
  };
  return e as unknown as RunEvent;
}

interface Page {
  events: RunEvent[];
  next_cursor: string | null;
}

async function page(handler: (r: Request) => Promise<Response>, path: string, headers = {}): Promise<Page> {
  const response = await handler(get(path, headers));
  assert.equal(response.status, 200, path);
  return await response.json();
}

Deno.test("GET /v1/sessions/{id}/trace pages 450 events as 200, 200 and 50, oldest first", async () => {
  using h = httpHarness();
  await h.store.getOrCreate(keyOf("s", "local"));
  for (let n = 0; n < 450; n++) h.tracer.write(event("local", "s", n));
  const first = await page(h.handler, "/v1/sessions/s/trace");
  assert.equal(first.events.length, 200);
  assert.equal(typeof first.next_cursor, "string");
  const second = await page(h.handler, `/v1/sessions/s/trace?cursor=${first.next_cursor}`);
  const third = await page(h.handler, `/v1/sessions/s/trace?cursor=${second.next_cursor}`);
  assert.deepEqual([second.events.length, third.events.length, third.next_cursor], [200, 50, null]);
  const steps = [...first.events, ...second.events, ...third.events].map((e) => e.step);
  assert.deepEqual(steps, Array.from({ length: 450 }, (_, n) => n));
  const big = await page(h.handler, "/v1/sessions/s/trace?limit=1000");
  assert.deepEqual([big.events.length, big.next_cursor], [450, null]);
  const one = await page(h.handler, "/v1/sessions/s/trace?limit=1");
  assert.deepEqual(one.events.map((e) => e.step), [0]);
});

Deno.test("GET trace answers 400 for a limit outside 1..1000 or a cursor it did not hand out", async () => {
  using h = httpHarness();
  await h.store.getOrCreate(keyOf("s", "local"));
  for (const limit of ["0", "1001", "abc", "1.5", "-1", "", "1e3"]) {
    const response = await h.handler(get(`/v1/sessions/s/trace?limit=${limit}`));
    assert.equal(response.status, 400, `limit=${limit}`);
    const body = await response.json();
    assert.equal(body.error.code, "invalid_limit");
    assert.match(body.error.message, /limit must be an integer from 1 to 1000/);
  }
  // An old file cursor (t2:<inode>:<birth>:<offset>) is no longer one.
  for (const cursor of ["nonsense", "dDE6MTox%21", btoa("t1:-1:0"), btoa("t2:12:34:56"), ""]) {
    const response = await h.handler(get(`/v1/sessions/s/trace?cursor=${cursor}`));
    assert.equal(response.status, 400, `cursor=${cursor}`);
    assert.equal((await response.json()).error.code, "invalid_cursor");
  }
});

Deno.test("bob's trace for session default never shows alice's events, nor lines that name no user", async () => {
  using h = httpHarness({ tokens: TOKENS });
  await h.store.getOrCreate(keyOf("default", "bob"));
  h.tracer.write(event("alice", "default", 1));
  h.tracer.write(event("bob", "default", 2));
  // Lines without user_id (as events were once written) are nobody's: the file keeps them, no page shows them.
  h.tracer.write(event(null, "default", 3, "run_start", "bob-run", { user_id: "bob" }));
  h.tracer.write(event("bob", "default", 4));
  const bob = await page(h.handler, "/v1/sessions/default/trace", as(TOKENS[1].token));
  assert.deepEqual(bob.events.map((e) => e.step), [2, 4]);
  assert.equal(readTrace(h.tracePath).length, 4);
  const alice = await h.handler(get("/v1/sessions/default/trace", as(TOKENS[0].token)));
  assert.equal(alice.status, 404, "alice has no session default");
  await alice.body?.cancel();
});

Deno.test("after DELETE the session's trace is 404, while its lines stay in the file", async () => {
  using h = httpHarness();
  await (await h.handler(postMessage("s1", { message: "what is 6*7?" }))).body?.cancel();
  const before = await page(h.handler, "/v1/sessions/s1/trace");
  assert.ok(before.events.length > 0);
  assert.equal(before.next_cursor, null);
  assert.equal(
    (await h.handler(new Request("http://agent.test/v1/sessions/s1", { method: "DELETE" }))).status,
    204,
  );
  const after = await h.handler(get("/v1/sessions/s1/trace"));
  assert.equal(after.status, 404);
  assert.equal((await after.json()).error.code, "not_found");
  assert.equal(readTrace(h.tracePath).length, before.events.length);
});

Deno.test("pages hold the events every process on the database shipped, in order, and a cursor goes on after a restart", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  // Two processes' worth: each its own connection and its own shipping, one batching its events.
  const [mine, theirs] = [new SqliteStore(path), new SqliteStore(path)];
  const [here, there] = [new SharedTrace(mine.trace), new SharedTrace(theirs.trace, { delayMs: 60_000 })];
  try {
    const { createdAt: since } = await mine.getOrCreate(keyOf("s", "local"));
    // Events land in the table in the order they were shipped (there's window is cut short by flushed()).
    for (let n = 0; n < 40; n++) {
      const process = n % 2 === 0 ? here : there;
      process.add({ ...event("local", n % 4 === 3 ? "t" : "s", n) });
      await process.flushed();
    }
    const query = { userId: "local", sessionId: "s", since, runId: null, limit: 7 };
    const first = await here.page({ ...query, cursor: null });
    assert.deepEqual(first.events.map((e) => e.step), [0, 1, 2, 4, 5, 6, 8]);
    const cursor = decodeTraceCursor(encodeTraceCursor(first.nextCursor!));
    await here.close();
    await mine.close();
    // A new process on the same file goes on where the cursor points.
    const again = new SqliteStore(path);
    try {
      const rest = await again.trace.page({ ...query, limit: 100, cursor });
      const all = [...first.events, ...rest.events].map((e) => e.step);
      assert.deepEqual(all, Array.from({ length: 40 }, (_, n) => n).filter((n) => n % 4 !== 3));
      assert.equal(rest.nextCursor, null);
      const run = await again.trace.page({ ...query, runId: "other", cursor: null });
      assert.deepEqual(run.events, [], "only the run asked for");
    } finally {
      await again.close();
    }
  } finally {
    await here.close();
    await there.close();
    await mine.close();
    await theirs.close();
  }
});

Deno.test("the database's trace table keeps the newest AGENT_TRACE_TABLE_MAX_EVENTS, the oldest pages go", async () => {
  using dir = tempDir();
  const store = new SqliteStore(`${dir.path}/s.db`);
  const shared = new SharedTrace(store.trace, { maxEvents: 100 });
  try {
    const { createdAt: since } = await store.getOrCreate(keyOf("s", "local"));
    for (let n = 0; n < 450; n++) {
      shared.add({ ...event("local", "s", n) });
      await shared.flushed();
    }
    const all = await shared.page({
      userId: "local",
      sessionId: "s",
      since,
      runId: null,
      limit: 1000,
      cursor: null,
    });
    assert.deepEqual(all.events.map((e) => e.step), Array.from({ length: 150 }, (_, n) => 300 + n));
  } finally {
    await shared.close();
    await store.close();
  }
});
