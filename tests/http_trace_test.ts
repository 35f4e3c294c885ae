/** The paged trace route through the real handler: pages, bounds, users, rotation, deletes, the event loop. */
import assert from "node:assert/strict";
import { JsonlTracer, readTrace } from "../src/trace/trace.ts";
import { decodeTraceCursor } from "../src/http/trace_route.ts";
import { type TraceFile, TraceReader } from "../src/trace/reader.ts";
import type { RunEvent } from "../src/events.ts";
import { httpHarness, postMessage } from "./_http_harness.ts";
import { keyOf } from "./_harness.ts";

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
  for (const cursor of ["nonsense", "dDE6MTox%21", btoa("t1:-1:0"), ""]) {
    const response = await h.handler(get(`/v1/sessions/s/trace?cursor=${cursor}`));
    assert.equal(response.status, 400, `cursor=${cursor}`);
    assert.equal((await response.json()).error.code, "invalid_cursor");
  }
});

Deno.test("bob's trace for session default never shows alice's events, old lines attributed by run_start", async () => {
  using h = httpHarness({ tokens: TOKENS });
  await h.store.getOrCreate(keyOf("default", "bob"));
  h.tracer.write(event("alice", "default", 1));
  h.tracer.write(event("bob", "default", 2));
  // Lines from before events carried user_id: their run's run_start names the user.
  h.tracer.write(event(null, "default", 3, "run_start", "alice-run", { user_id: "alice" }));
  h.tracer.write(event(null, "default", 4, "llm_call", "alice-run"));
  h.tracer.write(event(null, "default", 5, "run_start", "bob-run", { user_id: "bob" }));
  h.tracer.write(event(null, "default", 6, "llm_call", "bob-run"));
  h.tracer.write(event(null, "default", 7, "llm_call", "unknown-run"));
  const bob = await page(h.handler, "/v1/sessions/default/trace", as(TOKENS[1].token));
  assert.deepEqual(bob.events.map((e) => e.step), [2, 5, 6]);
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

/** Opens trace files through a wrapper that counts the bytes read and can hold reads until released. */
function countingOpen() {
  const state = { bytes: 0, hold: null as Promise<void> | null };
  const open = async (path: string): Promise<TraceFile> => {
    const file = await Deno.open(path);
    return {
      read: async (buffer) => {
        if (state.hold !== null) await state.hold;
        const n = await file.read(buffer);
        state.bytes += n ?? 0;
        return n;
      },
      seek: (offset, whence) => file.seek(offset, whence),
      stat: () => file.stat(),
      close: () => file.close(),
    };
  };
  return { state, open };
}

const bytesOf = (events: RunEvent[]) =>
  events.reduce((sum, e) => sum + new TextEncoder().encode(JSON.stringify(e) + "\n").length, 0);

Deno.test("GET trace reads only the lines of the page it returns, not the other sessions' lines", async () => {
  const { state, open } = countingOpen();
  using h = httpHarness({ openTrace: open });
  await h.store.getOrCreate(keyOf("s", "local"));
  // Another process's writes: the reader learns of them only from the file.
  const other = new JsonlTracer(h.tracePath);
  for (let n = 0; n < 3000; n++) other.write(event("local", n % 100 === 0 ? "s" : `other-${n % 7}`, n));
  other.close();
  await page(h.handler, "/v1/sessions/s/trace?limit=1"); // the first request indexes the file
  state.bytes = 0;
  const first = await page(h.handler, "/v1/sessions/s/trace?limit=10");
  assert.equal(first.events.length, 10);
  assert.equal(state.bytes, bytesOf(first.events), "exactly the page's lines");
  // Lines this process writes are indexed as they are written; another process's are read once.
  for (let n = 0; n < 50; n++) h.tracer.write(event("local", n % 5 === 0 ? "s" : "other-1", 5000 + n));
  state.bytes = 0;
  const second = await page(h.handler, `/v1/sessions/s/trace?cursor=${first.next_cursor}&limit=30`);
  assert.equal(second.events.length, 30);
  assert.equal(state.bytes, bytesOf(second.events));
  assert.ok(state.bytes < Deno.statSync(h.tracePath).size / 20);
});

Deno.test("a trace request waiting on file reads does not hold up /healthz", async () => {
  const { state, open } = countingOpen();
  using h = httpHarness({ openTrace: open });
  await h.store.getOrCreate(keyOf("s", "local"));
  const other = new JsonlTracer(h.tracePath);
  for (let n = 0; n < 2000; n++) other.write(event("local", n % 2 === 0 ? "s" : "other", n));
  other.close();
  let release = () => {};
  state.hold = new Promise((resolve) => (release = resolve));
  let traceDone = false;
  const trace = h.handler(get("/v1/sessions/s/trace")).then((response) => {
    traceDone = true;
    return response;
  });
  const health = await h.handler(get("/healthz"));
  assert.equal(health.status, 200);
  await health.body?.cancel();
  assert.equal(traceDone, false, "/healthz answered while the trace was still reading");
  state.hold = null;
  release();
  const response = await trace;
  assert.equal(response.status, 200);
  assert.equal((await response.json()).events.length, 200);
});

Deno.test("GET trace pages across rotated files, and its cursor still works after a restart", async () => {
  using h = httpHarness({ traceMaxBytes: 4000 });
  await h.store.getOrCreate(keyOf("s", "local"));
  const other = new JsonlTracer(h.tracePath, { maxBytes: 4000 });
  for (let n = 0; n < 100; n++) (n % 3 === 0 ? other : h.tracer).write(event("local", "s", n));
  other.close();
  assert.ok(Deno.statSync(`${h.tracePath}.3`).isFile, "the trace rotated");
  const steps: number[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const query: string = cursor === null ? "" : `&cursor=${cursor}`;
    const next: Page = await page(h.handler, `/v1/sessions/s/trace?limit=7${query}`);
    steps.push(...next.events.map((e) => e.step!));
    cursor = next.next_cursor;
    pages++;
    if (pages === 5) {
      // A new server process: a fresh index over the same files continues where the cursor points.
      const fresh = await new TraceReader(h.tracePath).page({
        userId: "local",
        sessionId: "s",
        since: (await h.store.get(keyOf("s", "local")))!.createdAt,
        runId: null,
        limit: 7,
        cursor: decodeTraceCursor(cursor!),
      });
      const same: Page = await page(h.handler, `/v1/sessions/s/trace?limit=7&cursor=${cursor}`);
      assert.deepEqual(fresh.events, same.events);
    }
  } while (cursor !== null);
  assert.deepEqual(steps, Array.from({ length: 100 }, (_, n) => n));
  assert.equal(pages, 15);
});
