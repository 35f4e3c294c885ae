/**
 * The session lease in the handler and the chat: a turn (or a delete) waits while another process holds the
 * session, in the session's queue (429 beyond it); a lost lease is a 503 that keeps nothing; a background
 * compaction keeps the turn's lease until it ends; the chat says it waits.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { BackgroundCompactions } from "../src/session/background.ts";
import { runChat } from "../src/cli/chat.ts";
import { SessionLeases } from "../src/session/leases.ts";
import { SessionRunner } from "../src/session/runner.ts";
import type { Summarizer } from "../src/memory/summarizer.ts";
import { deterministicSummarizer } from "../src/memory/summarizer.ts";
import type { LeaseStore } from "../src/store/store.ts";
import { harness, keyOf, leaseStoreWith, textSink } from "./_harness.ts";
import { httpHarness, postMessage, until } from "./_http_harness.ts";

const fast = { minPollMs: 5, maxPollMs: 20 };
const KEY = keyOf("s", "local");

/** `store`'s leases, counting the takes it refused (`refused()`): a wait the test can see. */
function countingRefusals(store: LeaseStore): { store: LeaseStore; refused(): number } {
  let refused = 0;
  const counted = leaseStoreWith(store, {
    acquireLease: async (...args) => {
      const take = await store.acquireLease(...args);
      if (!take.taken) refused++;
      return take;
    },
  });
  return { store: counted, refused: () => refused };
}

/** Whether `promise` has settled, as of now. */
function settledFlag(promise: Promise<unknown>): () => boolean {
  let settled = false;
  promise.then(() => (settled = true), () => (settled = true));
  return () => settled;
}

Deno.test("POST /messages waits while another process holds the session's lease, then runs the turn", async () => {
  using h = httpHarness();
  const leases = countingRefusals(h.store);
  h.deps.sessions = new SessionRunner({
    leases: new SessionLeases(leases.store, { owner: "here", ...fast }),
  });
  (await h.store.acquireLease(KEY, "elsewhere", 60_000)).taken;
  const answered = h.handler(postMessage("s", { message: "hello" }));
  const settled = settledFlag(answered);
  await until(() => leases.refused() >= 2, "the lease to be found busy twice");
  assert.equal(settled(), false, "the turn waits");
  assert.equal(h.llm.calls, 0);
  assert.equal(await h.store.get(KEY), null, "nothing written meanwhile");
  await h.store.releaseLease(KEY, "elsewhere");
  const response = await answered;
  assert.equal(response.status, 200);
  assert.equal((await response.json()).answer, "echo: hello");
  assert.equal((await h.store.acquireLease(KEY, "elsewhere", 1000)).taken, true, "released after the turn");
});

Deno.test("turns waiting for a busy lease wait in the session's queue: one more than it holds gets a 429", async () => {
  using h = httpHarness({ maxWaiting: 1 });
  const leases = new SessionLeases(h.store, { owner: "here", ...fast });
  h.deps.sessions = new SessionRunner({ queue: { maxWaiting: 1 }, leases });
  (await h.store.acquireLease(KEY, "elsewhere", 60_000)).taken;
  const first = h.handler(postMessage("s", { message: "one" }));
  const second = h.handler(postMessage("s", { message: "two" }));
  await until(() => h.deps.sessions.waiting(KEY) === 1, "the second turn to wait behind the first");
  const third = await h.handler(postMessage("s", { message: "three" }));
  assert.equal(third.status, 429);
  assert.ok(Number(third.headers.get("retry-after")) >= 1);
  await third.body?.cancel();
  await h.store.releaseLease(KEY, "elsewhere");
  const answers = await Promise.all([first, second].map(async (r) => (await (await r).json()).answer));
  assert.deepEqual(answers, ["echo: one", "echo: two"]);
});

Deno.test("a turn whose lease is lost answers 503 session_lease_lost and keeps nothing of the turn", async () => {
  using h = httpHarness();
  let lose = false;
  const leaky = leaseStoreWith(h.store, {
    renewLease: (key, owner, ttl) => lose ? Promise.resolve(false) : h.store.renewLease(key, owner, ttl),
  });
  h.deps.sessions = new SessionRunner({
    leases: new SessionLeases(leaky, { owner: "here", ttlMs: 60, ...fast }),
  });
  h.llm.hold = true;
  const answered = h.handler(postMessage("s", { message: "hello" }));
  await until(() => h.llm.calls > 0, "the model call");
  lose = true;
  const response = await answered;
  h.llm.release();
  assert.equal(response.status, 503);
  assert.equal(response.headers.get("retry-after"), "1");
  const body = await response.json();
  assert.equal(body.error.code, "session_lease_lost");
  assert.match(body.error.message, /lost the lease of session "s".*send it again/);
  assert.deepEqual(await h.store.messages(KEY), [], "the question was taken back");
});

Deno.test("DELETE /v1/sessions/{id} waits while another process holds the session's lease", async () => {
  using h = httpHarness();
  const leases = countingRefusals(h.store);
  h.deps.sessions = new SessionRunner({
    leases: new SessionLeases(leases.store, { owner: "here", ...fast }),
  });
  assert.equal((await h.handler(postMessage("s", { message: "hello" }))).status, 200);
  (await h.store.acquireLease(KEY, "elsewhere", 60_000)).taken;
  const deleted = h.handler(new Request("http://agent.test/v1/sessions/s", { method: "DELETE" }));
  const settled = settledFlag(deleted);
  await until(() => leases.refused() >= 2, "the lease to be found busy twice");
  assert.equal(settled(), false, "the delete waits");
  assert.notEqual(await h.store.get(KEY), null);
  await h.store.releaseLease(KEY, "elsewhere");
  assert.equal((await deleted).status, 204);
  assert.equal(await h.store.get(KEY), null);
});

Deno.test("a background compaction keeps the turn's lease until it ends: no other process runs meanwhile", async () => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let asked = 0;
  const summarizer: Summarizer = async (input, signal) => {
    asked++;
    await held;
    return deterministicSummarizer(input, signal);
  };
  using h = httpHarness({ compaction: { maxRawTurns: 1, compactBatch: 0, summarizer } });
  const leases = new SessionLeases(h.store, { owner: "here", ...fast });
  h.deps.sessions = new SessionRunner({ leases });
  h.deps.agent.compactions = new BackgroundCompactions((event) => h.tracer.write(event), {
    sessions: h.deps.sessions,
  });
  for (const message of ["one", "two"]) {
    assert.equal((await h.handler(postMessage("s", { message }))).status, 200);
  }
  await until(() => asked > 0, "the summary call");
  assert.equal((await h.store.acquireLease(KEY, "elsewhere", 1000)).taken, false, "held for the compaction");
  // A turn of this process goes on alongside, as it did without leases.
  const third = await h.handler(postMessage("s", { message: "three" }));
  assert.equal((await third.json()).answer, "echo: three");
  release();
  await h.deps.agent.compactions.idle();
  assert.notEqual((await h.store.get(KEY))!.summary, null, "compacted");
  assert.equal((await h.store.acquireLease(KEY, "elsewhere", 1000)).taken, true, "released once it ended");
});

Deno.test("chat waits for a session busy in another process, saying so, then runs the turn", async () => {
  using h = harness([{ content: "hi there" }]);
  const leases = new SessionLeases(h.store, { owner: "chat", ...fast });
  (await h.store.acquireLease(KEY, "elsewhere", 60_000)).taken;
  const input = new PassThrough();
  const output = textSink();
  const status = textSink();
  const exit = runChat({
    ...KEY,
    deps: h.agent,
    store: h.store,
    emit: h.run.emit,
    input,
    output: output.stream,
    status: status.stream,
    interactive: false,
    sessions: new SessionRunner({ leases }),
  });
  input.end("hello\n");
  const waiting = /waiting for session s, busy in another process…/;
  await until(() => waiting.test(status.text()), "the chat to say it waits");
  assert.equal(output.text(), "", "no answer yet");
  await h.store.releaseLease(KEY, "elsewhere");
  assert.equal(await exit, 0);
  assert.equal(output.text(), "hi there\n");
  assert.equal(leases.size, 0);
});
