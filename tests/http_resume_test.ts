/**
 * Resumable turns over real loopback: every SSE run event carries an id; a client of a `Prefer: resumable`
 * turn that loses its stream leaves the turn running and follows it again from the trace table
 * (`GET …/runs/{run_id}/events`, `Last-Event-ID`), getting each event once; `POST …/cancel` stops a running
 * turn (taken back as an abort), and users never reach each other's runs.
 */
import assert from "node:assert/strict";
import { RunEventIds } from "../src/http/run_events.ts";
import { keyOf } from "./_harness.ts";
import { FrameReader } from "./_sse_frames.ts";
import { type HttpHarness, httpHarness, until, withServer } from "./_http_harness.ts";

const SSE = { accept: "text/event-stream" };
const RESUMABLE = { ...SSE, prefer: "resumable" };

function post(url: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

function events(
  url: string,
  session: string,
  runId: string,
  headers: Record<string, string> = {},
  query = "",
) {
  return fetch(`${url}/v1/sessions/${session}/runs/${runId}/events${query}`, { headers });
}

/** The status of `response`, its body consumed. */
async function status(response: Promise<Response>): Promise<number> {
  const answered = await response;
  await answered.body?.cancel();
  return answered.status;
}

/** The run's events in the trace table, with the ids a read gives them. */
async function tableIds(h: HttpHarness, session: string, runId: string): Promise<string[]> {
  const { createdAt } = (await h.store.get(keyOf(session, "local")))!;
  const query = { userId: "local", sessionId: session, since: createdAt, runId, limit: 1000, cursor: null };
  const ids = new RunEventIds();
  return (await h.trace.page(query)).events.map((event) => `${ids.next(event)} ${event.event}`);
}

Deno.test("a resumable SSE turn outlives its connection: the events route gives what was missed, then the rest, each once", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const response = await post(url, "/v1/sessions/r1/messages", { message: "what is 6*7?" }, RESUMABLE);
    assert.equal(response.headers.get("preference-applied"), "resumable");
    const runId = response.headers.get("x-run-id")!;
    const live = new FrameReader(response);
    await until(() => h.llm.calls === 1, "the first model call to start");
    // The first call goes on; the second (after the tool) is held.
    h.llm.release();
    h.llm.hold = true;
    await live.until((frame) => frame.event === "tool_result");
    await until(() => h.llm.calls === 2, "the second model call to start");
    await live.cancel();
    // The client is gone; the turn is not: it goes on once the model answers.
    h.llm.release();
    await until(() => h.deps.sessions.size === 0, "the turn to end");
    assert.equal(h.llm.aborted, 0, "no model call was aborted");
    const stored = await h.store.messages(keyOf("r1", "local"));
    assert.equal(stored.at(-1)?.content, "The answer is 42.");

    const seen = live.frames.filter((frame) => frame.id !== undefined);
    assert.deepEqual(seen.map((f) => `${f.id} ${f.event}`), [
      "0.1 run_start",
      "0.2 llm_call",
      "0.3 tool_call",
      "0.4 tool_result",
    ]);
    assert.ok(seen.every((f) => f.data.run_id === runId), "X-Run-Id names the run");
    const resumed = await new FrameReader(await events(url, "r1", runId, { "last-event-id": "0.4" })).rest();
    assert.deepEqual(resumed.map((f) => `${f.id} ${f.event}`), ["0.5 llm_call", "0.6 answer", "0.7 run_end"]);
    assert.equal(
      resumed[1].data.data && (resumed[1].data.data as { text: string }).text,
      "The answer is 42.",
    );
    assert.deepEqual(
      [...seen, ...resumed].map((f) => `${f.id} ${f.event}`),
      await tableIds(h, "r1", runId),
      "live and resumed ids are the table's",
    );
    // The same through the query parameter, and from the start without an id.
    const fromQuery = await new FrameReader(await events(url, "r1", runId, {}, "?last_event_id=0.6")).rest();
    assert.deepEqual(fromQuery.map((f) => f.id), ["0.7"]);
    const whole = await new FrameReader(await events(url, "r1", runId)).rest();
    assert.equal(whole.length, 7);
    // The client saw the end: nothing more comes.
    const after = await new FrameReader(await events(url, "r1", runId, { "last-event-id": "0.7" })).rest();
    assert.deepEqual(after, []);
  });
});

Deno.test("a follower that joins mid-run gets the stored events, then each later one as it is stored, none twice", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const response = await post(url, "/v1/sessions/r2/messages", { message: "what is 2*21?" }, RESUMABLE);
    const runId = response.headers.get("x-run-id")!;
    const live = new FrameReader(response);
    await live.until((frame) => frame.event === "run_start");
    await live.cancel();
    const follower = new FrameReader(await events(url, "r2", runId, { "last-event-id": "0.1" }));
    await until(() => h.llm.calls === 1, "the first model call to start");
    h.llm.release();
    const followed = await follower.rest();
    assert.deepEqual(followed.map((f) => `${f.id} ${f.event}`), (await tableIds(h, "r2", runId)).slice(1));
    assert.equal(followed.at(-1)?.event, "run_end");
    assert.equal(followed.filter((f) => f.event === "answer").length, 1);
  });
});

Deno.test("without Prefer: resumable an SSE turn still ends with its connection, and its events carry ids", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const response = await post(url, "/v1/sessions/r3/messages", { message: "what is 6*7?" }, SSE);
    assert.equal(response.headers.get("preference-applied"), null);
    const live = new FrameReader(response);
    await live.until((frame) => frame.event === "run_start");
    assert.equal(live.frames[0].id, "0.1");
    await until(() => h.llm.calls === 1, "the model call to start");
    await live.cancel();
    await until(() => h.llm.aborted === 1, "the model call to see the abort");
    await until(() => h.deps.sessions.size === 0, "the turn to end");
    assert.deepEqual(await h.store.messages(keyOf("r3", "local")), []);
  });
});

Deno.test("POST …/cancel stops the running turn: 202 with its run id, the stream ends turn_cancelled, the turn is taken back", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const response = await post(url, "/v1/sessions/c1/messages", { message: "what is 6*7?" }, RESUMABLE);
    const runId = response.headers.get("x-run-id")!;
    const live = new FrameReader(response);
    await live.until((frame) => frame.event === "run_start");
    await until(() => h.llm.calls === 1, "the model call to start");
    const follower = new FrameReader(await events(url, "c1", runId, { "last-event-id": "0.1" }));

    const wrongRun = await post(url, "/v1/sessions/c1/cancel?run_id=another-run", undefined);
    assert.equal(wrongRun.status, 409);
    assert.equal((await wrongRun.json()).error.code, "no_running_turn");
    const cancel = await post(url, `/v1/sessions/c1/cancel?run_id=${runId}`, undefined);
    assert.equal(cancel.status, 202);
    assert.deepEqual(await cancel.json(), { session_id: "c1", run_id: runId });

    const frames = await live.rest();
    assert.deepEqual(frames.map((f) => f.event), ["run_start", "error", "run_end", "error"]);
    assert.equal((frames[1].data.data as { kind: string }).kind, "aborted");
    assert.match((frames[1].data.data as { message: string }).message, /was cancelled/);
    assert.equal((frames[2].data.data as { outcome: string }).outcome, "aborted");
    const error = frames[3].data.error as { code: string; status: number; run_id: string };
    assert.deepEqual([error.code, error.status, error.run_id], ["turn_cancelled", 409, runId]);
    assert.deepEqual((await follower.rest()).map((f) => `${f.id} ${f.event}`), ["0.2 error", "0.3 run_end"]);
    assert.equal(h.llm.aborted, 1);
    assert.deepEqual(await h.store.messages(keyOf("c1", "local")), [], "the question is taken back");

    const idle = await post(url, "/v1/sessions/c1/cancel", undefined);
    assert.equal(idle.status, 409);
    assert.match((await idle.json()).error.message, /session "c1" has no turn running/);
  });
});

Deno.test("a JSON turn cancelled from another request answers 409 turn_cancelled", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const turn = post(url, "/v1/sessions/c2/messages", { message: "hello" });
    await until(() => h.llm.calls === 1, "the model call to start");
    assert.equal(await status(post(url, "/v1/sessions/c2/cancel", undefined)), 202);
    const response = await turn;
    assert.equal(response.status, 409);
    assert.equal((await response.json()).error.code, "turn_cancelled");
  });
});

Deno.test("a user can neither follow nor cancel another user's run, and bad ids are refused", async () => {
  const tokens = [{ token: "tok-alice-0123456789", userId: "alice" }, {
    token: "tok-bob-01234567890",
    userId: "bob",
  }];
  using h = httpHarness({ tokens });
  h.llm.hold = true;
  const alice = { authorization: `Bearer ${tokens[0].token}` };
  const bob = { authorization: `Bearer ${tokens[1].token}` };
  await withServer(h, async ({ url }) => {
    const response = await post(url, "/v1/sessions/s/messages", { message: "hello" }, {
      ...RESUMABLE,
      ...alice,
    });
    const runId = response.headers.get("x-run-id")!;
    const live = new FrameReader(response);
    await live.until((frame) => frame.event === "run_start");
    // Bob has no session "s": 404, as on every session route.
    assert.equal(await status(post(url, "/v1/sessions/s/cancel", undefined, bob)), 404);
    assert.equal(await status(events(url, "s", runId, bob)), 404);
    // Once bob has a session "s" of his own, alice's run is still not in it.
    h.llm.release();
    await live.rest();
    await (await post(url, "/v1/sessions/s/messages", { message: "hi" }, bob)).body?.cancel();
    const other = await events(url, "s", runId, bob);
    assert.equal(other.status, 404);
    assert.equal((await other.json()).error.code, "run_not_found");
    assert.equal(await status(post(url, "/v1/sessions/s/cancel", undefined, bob)), 409);

    const bad = await events(url, "s", runId, { ...alice, "last-event-id": "seven" });
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).error.code, "invalid_event_id");
    assert.equal(await status(events(url, "s", "not%20an%20id", alice)), 400);
    assert.equal(
      (await new FrameReader(await events(url, "s", runId, alice)).rest()).at(-1)?.event,
      "run_end",
    );
  }, { overrides: { follow: { firstEventMs: 200 } } });
});

Deno.test("a follower of a run that stalls ends after the idle bound with a 504 run_idle frame", async () => {
  using h = httpHarness();
  h.llm.hold = true;
  await withServer(h, async ({ url }) => {
    const response = await post(url, "/v1/sessions/i1/messages", { message: "hello" }, RESUMABLE);
    const runId = response.headers.get("x-run-id")!;
    const live = new FrameReader(response);
    await live.until((frame) => frame.event === "run_start");
    const frames = await new FrameReader(await events(url, "i1", runId)).rest();
    assert.deepEqual(frames.map((f) => f.event), ["run_start", "error"]);
    assert.deepEqual((frames[1].data.error as { code: string }).code, "run_idle");
    h.llm.release();
    await live.rest();
  }, { overrides: { follow: { pollMs: 5, maxIdleMs: 50, firstEventMs: 50 } } });
});
