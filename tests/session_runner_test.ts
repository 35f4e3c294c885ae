/**
 * SessionRunner: the one way work runs on a session (HTTP turns and deletes, chat turns, background
 * compactions): this process's queue for the session first, then the session's lease. Time is a fake clock
 * shared by the leases and the store.
 */
import assert from "node:assert/strict";
import { LeaseLostError, QueueFullError } from "../src/errors.ts";
import { SessionLeases } from "../src/session/leases.ts";
import type { LeaseStore } from "../src/store/store.ts";
import { SessionRunner } from "../src/session/runner.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { FakeClock, settle } from "./_fake_clock.ts";
import { keyOf, leaseStoreWith } from "./_harness.ts";

const KEY = keyOf("s");

function fixture() {
  const clock = new FakeClock();
  const store = new SqliteStore(":memory:", { now: () => new Date(clock.now()) });
  const leasesOf = (owner: string, on: LeaseStore = store) =>
    new SessionLeases(on, { owner, minPollMs: 5, maxPollMs: 20, clock, random: () => 0.5 });
  return { clock, store, leasesOf, [Symbol.asyncDispose]: () => store.close() };
}

/** A work that runs until `open()`, logging its start and end. */
function gated(log: string[], name: string) {
  const { promise, resolve } = Promise.withResolvers<void>();
  return {
    open: () => resolve(),
    work: async (signal: AbortSignal) => {
      log.push(`start ${name}`);
      await promise;
      log.push(`end ${name}`);
      return signal;
    },
  };
}

Deno.test("SessionRunner.run() runs one session's works one at a time, in order, under the session's lease", async () => {
  await using f = fixture();
  const runner = new SessionRunner({ leases: f.leasesOf("here") });
  const log: string[] = [];
  const [a, b] = [gated(log, "a"), gated(log, "b")];
  const first = runner.run(KEY, a.work);
  const second = runner.run(KEY, b.work);
  await settle();
  assert.deepEqual(log, ["start a"]);
  assert.equal(runner.waiting(KEY), 1);
  assert.equal((await f.store.acquireLease(KEY, "elsewhere", 1000)).taken, false, "leased while it runs");
  a.open();
  await first;
  await settle();
  assert.deepEqual(log, ["start a", "end a", "start b"]);
  b.open();
  await second;
  assert.equal(runner.size, 0);
  assert.equal((await f.store.acquireLease(KEY, "elsewhere", 1000)).taken, true, "released after the last");
});

Deno.test("SessionRunner.run() waits for another process's lease, saying so once, and runs once it is free", async () => {
  await using f = fixture();
  const [here, there] = [new SessionRunner({ leases: f.leasesOf("here") }), f.leasesOf("there")];
  const log: string[] = [];
  const other = gated(log, "there");
  const held = there.hold(KEY, other.work);
  await settle();
  let waits = 0;
  const mine = here.run(KEY, () => Promise.resolve(void log.push(`here at ${f.clock.now()}`)), {
    onWait: () => waits++,
  });
  await f.clock.advance(500);
  assert.deepEqual(log, ["start there"]);
  assert.equal(waits, 1);
  const released = f.clock.now();
  other.open();
  await held;
  await f.clock.advance(20);
  await mine;
  assert.equal(log[1], "end there");
  const at = Number(log[2].replace("here at ", ""));
  assert.ok(at >= released && at <= released + 20, `ran ${at - released} ms after the release`);
});

Deno.test("SessionRunner.run({queued: false}) runs beside the queued work and keeps its lease after it (a background compaction)", async () => {
  await using f = fixture();
  const runner = new SessionRunner({ leases: f.leasesOf("here") });
  const log: string[] = [];
  const [turn, compaction, next] = [gated(log, "turn"), gated(log, "compaction"), gated(log, "next")];
  const running = runner.run(KEY, turn.work);
  await settle();
  const background = runner.run(KEY, compaction.work, { queued: false });
  await settle();
  assert.deepEqual(log, ["start turn", "start compaction"], "not behind the turn");
  turn.open();
  await running;
  const queued = runner.run(KEY, next.work);
  await settle();
  assert.deepEqual(log.slice(2), ["end turn", "start next"], "the next turn does not wait for it either");
  next.open();
  await queued;
  assert.equal((await f.store.acquireLease(KEY, "elsewhere", 1000)).taken, false, "the compaction holds it");
  compaction.open();
  await background;
  assert.equal((await f.store.acquireLease(KEY, "elsewhere", 1000)).taken, true);
});

Deno.test("SessionRunner.run({leased: false}) takes no lease (a session in a private store)", async () => {
  await using f = fixture();
  const runner = new SessionRunner({ leases: f.leasesOf("here") });
  const log: string[] = [];
  const work = gated(log, "private");
  const running = runner.run(KEY, work.work, { leased: false });
  await settle();
  assert.deepEqual(log, ["start private"]);
  assert.equal((await f.store.acquireLease(KEY, "elsewhere", 1000)).taken, true, "no lease taken");
  work.open();
  await running;
});

Deno.test("SessionRunner refuses a work past the session's queue, before and at run, running nothing", async () => {
  const runner = new SessionRunner({ queue: { maxWaiting: 1 } });
  const log: string[] = [];
  const [a, b] = [gated(log, "a"), gated(log, "b")];
  const runs = [runner.run(KEY, a.work), runner.run(KEY, b.work)];
  assert.equal(runner.rejection(keyOf("other")), null, "other sessions are free");
  const full = runner.rejection(KEY);
  assert.ok(full instanceof QueueFullError && full.scope === "session", String(full));
  let ran = false;
  await assert.rejects(runner.run(KEY, () => Promise.resolve(void (ran = true))), QueueFullError);
  assert.equal(ran, false);
  a.open();
  b.open();
  await Promise.all(runs);
  assert.equal(runner.rejection(KEY), null);
});

Deno.test("SessionRunner.run() aborts the work's signal with LeaseLostError when the lease is lost, and drops a waiting work whose signal aborts", async () => {
  await using f = fixture();
  const leaky = leaseStoreWith(f.store, { renewLease: () => Promise.resolve(false) });
  const runner = new SessionRunner({
    leases: new SessionLeases(leaky, { owner: "here", ttlMs: 30, clock: f.clock }),
  });
  const lost = runner.run(
    KEY,
    (signal) =>
      new Promise((resolve) =>
        signal.addEventListener("abort", () => resolve(signal.reason), { once: true })
      ),
  );
  const stop = new AbortController();
  let ran = false;
  const waiting = runner.run(KEY, () => Promise.resolve(void (ran = true)), { signal: stop.signal });
  await settle();
  stop.abort(new Error("client gone"));
  await assert.rejects(waiting, /client gone/);
  await f.clock.advance(10); // the first renewal, a third of 30 ms in
  const reason = await lost;
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.equal(ran, false);
  assert.equal(runner.size, 0);
});

Deno.test("SessionRunner without leases runs works in the queue alone, with a signal that never aborts by itself", async () => {
  const runner = new SessionRunner();
  const signal = await runner.run(KEY, (signal) => Promise.resolve(signal));
  assert.equal(signal.aborted, false);
  assert.throws(() => new SessionRunner({ queue: { maxWaiting: -1 } }), RangeError);
});
