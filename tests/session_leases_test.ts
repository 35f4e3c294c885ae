/**
 * SessionLeases: work on a session runs under its lease, shared within a process and exclusive between
 * processes (two instances stand for two processes), renewed while it runs, released on every path. Time is
 * a fake clock shared by the leases and the store, so each test asserts the moment things happen.
 */
import assert from "node:assert/strict";
import { LeaseLostError } from "../src/errors.ts";
import { SessionLeases, type SessionLeasesOptions } from "../src/session/leases.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { FakeClock, settle } from "./_fake_clock.ts";
import { keyOf, leaseStoreWith } from "./_harness.ts";

/** A promise and its resolver. */
function gate(): { promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** A store and leases on one fake clock; the pauses between tries are 5–20 ms with no jitter. */
function fixture() {
  const clock = new FakeClock();
  const store = new SqliteStore(":memory:", { now: () => new Date(clock.now()) });
  const leases = (owner: string, options: SessionLeasesOptions = {}) =>
    new SessionLeases(store, { owner, minPollMs: 5, maxPollMs: 20, clock, random: () => 0.5, ...options });
  const elapsed = (() => {
    const start = clock.now();
    return () => clock.now() - start;
  })();
  return { clock, store, leases, elapsed, [Symbol.asyncDispose]: () => store.close() };
}

Deno.test("SessionLeases.hold() makes another process wait until the lease is released, telling it once", async () => {
  await using f = fixture();
  const [a, b] = [f.leases("a"), f.leases("b")];
  const order: string[] = [];
  const first = gate();
  let waits = 0;
  const held = a.hold(keyOf("s"), async () => {
    order.push("a start");
    await first.promise;
    order.push(`a end at ${f.elapsed()}`);
  });
  await settle();
  const waiting = b.hold(keyOf("s"), () => Promise.resolve(void order.push(`b at ${f.elapsed()}`)), {
    onWait: () => waits++,
  });
  await f.clock.advance(1000);
  assert.deepEqual(order, ["a start"], "b waits as long as a works");
  assert.equal(waits, 1);
  first.open();
  // b's pause has grown to maxPollMs (20 ms): it tries again within 20 ms of the release.
  await f.clock.advance(20);
  await Promise.all([held, waiting]);
  assert.equal(order.length, 3);
  assert.equal(order[1], "a end at 1000");
  const at = Number(order[2].replace("b at ", ""));
  assert.ok(at > 1000 && at <= 1020, order[2]);
  assert.equal(a.size + b.size, 0, "nothing held once done");
  assert.equal((await f.store.acquireLease(keyOf("s"), "c", 1000)).taken, true, "released");
});

Deno.test("SessionLeases.hold() shares the lease within a process and releases it after the last work", async () => {
  await using f = fixture();
  const a = f.leases("a");
  const later = gate();
  let inner: Promise<void> | undefined;
  await a.hold(keyOf("s"), () => {
    // A compaction started by the turn: it joins the turn's lease at once.
    inner = a.hold(keyOf("s"), () => later.promise);
    return Promise.resolve();
  });
  assert.equal((await f.store.acquireLease(keyOf("s"), "b", 1000)).taken, false, "held for the second");
  later.open();
  await inner;
  assert.equal((await f.store.acquireLease(keyOf("s"), "b", 1000)).taken, true);
});

Deno.test("SessionLeases.hold() renews the lease every third of its time while work runs past its time", async () => {
  await using f = fixture();
  const renewals: number[] = [];
  const counting = leaseStoreWith(f.store, {
    renewLease: (...args) => (renewals.push(f.elapsed()), f.store.renewLease(...args)),
  });
  const a = new SessionLeases(counting, { owner: "a", ttlMs: 90, clock: f.clock });
  const done = gate();
  const held = a.hold(keyOf("s"), () => done.promise);
  const taken: boolean[] = [];
  for (let i = 0; i < 6; i++) {
    await f.clock.advance(50);
    taken.push((await f.store.acquireLease(keyOf("s"), "b", 90)).taken);
  }
  done.open();
  await held;
  assert.deepEqual(taken, [false, false, false, false, false, false], "300 ms held on a 90 ms lease");
  assert.deepEqual(renewals, [30, 60, 90, 120, 150, 180, 210, 240, 270, 300]);
  assert.equal((await f.store.acquireLease(keyOf("s"), "b", 90)).taken, true, "released, renewals stopped");
  await f.clock.advance(100);
  assert.equal(renewals.length, 10);
});

Deno.test("SessionLeases.hold() takes a lease whose holder died once it expires, and not before", async () => {
  await using f = fixture();
  assert.equal((await f.store.acquireLease(keyOf("s"), "dead", 150)).taken, true);
  let ranAt: number | undefined;
  const b = f.leases("b");
  const held = b.hold(keyOf("s"), () => Promise.resolve(void (ranAt = f.elapsed())));
  await f.clock.advance(149);
  assert.equal(ranAt, undefined, "the lease has 1 ms left");
  await f.clock.advance(21);
  await held;
  assert.ok(ranAt !== undefined && ranAt >= 150 && ranAt <= 170, `ran at ${ranAt}`);
});

Deno.test("SessionLeases.hold() aborts the work with LeaseLostError when a renewal finds the lease lost", async () => {
  await using f = fixture();
  let lose = false;
  const calls: string[] = [];
  const leaky = leaseStoreWith(f.store, {
    renewLease: (...args) => lose ? Promise.resolve(false) : f.store.renewLease(...args),
    releaseLease: (...args) => (calls.push("release"), f.store.releaseLease(...args)),
  });
  const a = new SessionLeases(leaky, { owner: "a", ttlMs: 60, clock: f.clock });
  let abortedAt: number | undefined;
  const held = a.hold(keyOf("s"), async (signal) => {
    await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
    abortedAt = f.elapsed();
    return signal.reason;
  });
  await f.clock.advance(30);
  assert.equal(abortedAt, undefined, "the renewal at 20 ms kept it");
  lose = true;
  await f.clock.advance(30);
  const reason = await held;
  assert.equal(abortedAt, 40, "the next renewal found it lost");
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.match(reason.message, /lost the lease of session "s"/);
  assert.deepEqual(calls, [], "a lost lease is not released");
  assert.equal(a.size, 0);
});

Deno.test("SessionLeases.cancel() reaches the holder at its next renewal: its works' onCancel run and it keeps the lease", async () => {
  await using f = fixture();
  const a = f.leases("a", { ttlMs: 60 });
  const b = f.leases("b", { ttlMs: 60 });
  const cancelledAt: number[] = [];
  const done = gate();
  const held = a.hold(keyOf("s"), (signal) => done.promise.then(() => signal.aborted), {
    onCancel: () => cancelledAt.push(f.elapsed()),
  });
  const quiet = a.hold(keyOf("s"), () => done.promise);
  await f.clock.advance(5);
  assert.equal(await b.cancel(keyOf("s")), true);
  await f.clock.advance(20);
  assert.deepEqual(cancelledAt, [20], "the renewal at 20 ms found the mark");
  await f.clock.advance(40);
  assert.deepEqual(cancelledAt, [20], "taken back: later renewals find no mark");
  assert.equal((await f.store.acquireLease(keyOf("s"), "c", 60)).taken, false, "still a's");
  assert.equal(await b.cancel(keyOf("s")), true, "a second cancel");
  await f.clock.advance(20);
  assert.deepEqual(cancelledAt, [20, 80]);
  done.open();
  assert.equal(await held, false, "the lease's own signal never aborted");
  await quiet;
  assert.equal(await b.cancel(keyOf("s")), false, "released: nothing to cancel");
  assert.equal(a.size, 0);
});

Deno.test("SessionLeases.hold() keeps a lease whose renewal fails to reach the store while it cannot have expired", async () => {
  await using f = fixture();
  let down = false;
  const flaky = leaseStoreWith(f.store, {
    renewLease: (...args) => down ? Promise.reject(new Error("store down")) : f.store.renewLease(...args),
  });
  const a = new SessionLeases(flaky, { owner: "a", ttlMs: 90, clock: f.clock });
  let abortedAt: number | undefined;
  const held = a.hold(keyOf("s"), async (signal) => {
    await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
    abortedAt = f.elapsed();
    return signal.reason;
  });
  await f.clock.advance(31); // renewed at 30: expires at 120
  down = true;
  await f.clock.advance(29); // the failed renewal at 60: 60 + 30 < 120, kept
  assert.equal(abortedAt, undefined);
  await f.clock.advance(30); // at 90: 90 + 30 is not before 120, lost
  const reason = await held;
  assert.equal(abortedAt, 90);
  assert.ok(reason instanceof LeaseLostError && reason.cause instanceof Error, String(reason));
  assert.match((reason.cause as Error).message, /store down/);
});

Deno.test("SessionLeases.hold() gives up waiting when its signal aborts, running nothing and leaving no lease", async () => {
  await using f = fixture();
  assert.equal((await f.store.acquireLease(keyOf("s"), "other", 60_000)).taken, true);
  const b = f.leases("b");
  const stop = new AbortController();
  let ran = false;
  const waiting = b.hold(keyOf("s"), () => Promise.resolve(void (ran = true)), { signal: stop.signal });
  await f.clock.advance(30);
  stop.abort(new Error("client gone"));
  await assert.rejects(waiting, /client gone/);
  await f.clock.advance(100);
  assert.equal(ran, false);
  assert.equal(b.size, 0);
  assert.equal(f.clock.pending, 0, "no pause left behind");
  await f.store.releaseLease(keyOf("s"), "other");
  assert.equal((await f.store.acquireLease(keyOf("s"), "c", 1000)).taken, true, "b took nothing");
});

Deno.test("SessionLeases.hold() releases the lease when the work throws, and rejects as it did", async () => {
  await using f = fixture();
  const a = f.leases("a");
  await assert.rejects(a.hold(keyOf("s"), () => Promise.reject(new TypeError("bad turn"))), TypeError);
  assert.equal((await f.store.acquireLease(keyOf("s"), "b", 1000)).taken, true);
});

/** The runs of one holder in `log` (who, from when to when), in order. */
function streaks(log: { who: string; at: number }[]) {
  const runs: { who: string; from: number; to: number }[] = [];
  for (const { who, at } of log) {
    const last = runs.at(-1);
    if (last?.who === who) last.to = at;
    else runs.push({ who, from: at, to: at });
  }
  return runs;
}

Deno.test("SessionLeases.hold() steps aside after fairShareMs of back-to-back works, so a waiting process gets in", async () => {
  await using f = fixture();
  const [a, b] = [f.leases("a", { fairShareMs: 100 }), f.leases("b", { fairShareMs: 100 })];
  const log: { who: string; at: number }[] = [];
  // Each process has a queue of 5 ms works on the session that never empties, as a busy server would.
  const busy = async (leases: SessionLeases, who: string) => {
    while (f.elapsed() < 1000) {
      await leases.hold(
        keyOf("s"),
        () => f.clock.sleep(5).then(() => void log.push({ who, at: f.elapsed() })),
      );
    }
  };
  const both = Promise.all([busy(a, "a"), busy(b, "b")]);
  await f.clock.advance(1100);
  await both;
  const runs = streaks(log);
  // Without stepping aside the first holder keeps the session for the whole second.
  assert.ok(runs.length >= 8, `${runs.length} runs: ${JSON.stringify(runs)}`);
  // Each keeps it for its fair share (100 ms, its first work's 5 ms not logged), at most until the other's
  // next try (a pause of at most 1.25 × 20 ms) shows someone waits; the last two are cut by the end.
  for (const run of runs.slice(0, -2)) {
    const kept = run.to - run.from;
    assert.ok(kept >= 95 && kept <= 125, `kept ${kept} ms: ${JSON.stringify(runs)}`);
  }
  assert.ok(a.stepsAside > 0 && b.stepsAside > 0, `${a.stepsAside} and ${b.stepsAside}`);
});

Deno.test("SessionLeases.hold() alone on a session never steps aside, however long it keeps it", async () => {
  await using f = fixture();
  const a = f.leases("a", { fairShareMs: 20 });
  let works = 0;
  const loop = (async () => {
    while (f.elapsed() < 300) await a.hold(keyOf("s"), () => f.clock.sleep(2).then(() => void works++));
  })();
  await f.clock.advance(300);
  await loop;
  assert.equal(works, 150, "one 2 ms work after another, no pause between");
  assert.equal(a.stepsAside, 0, "nobody asked for the lease");
});

Deno.test("SessionLeases.hold() lets go of a session kept through overlapping works, so a waiting process gets in", async () => {
  await using f = fixture();
  const [a, b] = [f.leases("a", { fairShareMs: 100 }), f.leases("b", { fairShareMs: 100 })];
  const log: { who: string; at: number }[] = [];
  // A new work of `a` every 5 ms, each 10 ms long, as queued turns and their compactions overlap: the
  // works in flight never drop to none while the load lasts.
  const works: Promise<void>[] = [];
  const overlapping = (async () => {
    while (f.elapsed() < 600) {
      works.push(
        a.hold(keyOf("s"), () => f.clock.sleep(10).then(() => void log.push({ who: "a", at: f.elapsed() }))),
      );
      await f.clock.sleep(5);
    }
  })();
  await f.clock.advance(50);
  assert.ok(log.length > 0 && log.every((entry) => entry.who === "a"), "a holds the session");
  const waiting = b.hold(keyOf("s"), () => Promise.resolve(void log.push({ who: "b", at: f.elapsed() })));
  await f.clock.advance(700);
  await Promise.all([overlapping, waiting]);
  await Promise.all(works);
  // b got in while a stayed busy (within its fair share and one pause), not only once a stopped.
  const b_ = log.find((entry) => entry.who === "b")!;
  assert.ok(b_.at <= 100 + 25 + 20, `b ran at ${b_.at}`);
  assert.ok(log.some((entry) => entry.who === "a" && entry.at > b_.at), "a went on after b");
});

Deno.test("SessionLeases rejects durations that cannot work", async () => {
  await using f = fixture();
  assert.throws(() => new SessionLeases(f.store, { ttlMs: 0 }), RangeError);
  assert.throws(() => new SessionLeases(f.store, { minPollMs: 100, maxPollMs: 10 }), RangeError);
  assert.throws(() => new SessionLeases(f.store, { fairShareMs: -1 }), RangeError);
});
