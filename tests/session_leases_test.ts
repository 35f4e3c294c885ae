/**
 * SessionLeases: work on a session runs under its lease, shared within a process and exclusive between
 * processes (two instances stand for two processes), renewed while it runs, released on every path.
 */
import assert from "node:assert/strict";
import { LeaseLostError } from "../src/errors.ts";
import { type LeaseStore, SessionLeases } from "../src/store/session_leases.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { keyOf } from "./_harness.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A promise and its resolver. */
function gate(): { promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

const fast = { minPollMs: 5, maxPollMs: 20 };

Deno.test("SessionLeases.hold() makes another process wait until the lease is released, telling it once", async () => {
  const store = new SqliteStore(":memory:");
  try {
    const a = new SessionLeases(store, { owner: "a", ...fast });
    const b = new SessionLeases(store, { owner: "b", ...fast });
    const order: string[] = [];
    const first = gate();
    let waits = 0;
    const held = a.hold(keyOf("s"), async () => {
      order.push("a start");
      await first.promise;
      order.push("a end");
    });
    await sleep(5);
    const waiting = b.hold(keyOf("s"), () => Promise.resolve(order.push("b")), { onWait: () => waits++ });
    await sleep(60);
    assert.deepEqual(order, ["a start"], "b waits");
    assert.equal(waits, 1);
    first.open();
    await Promise.all([held, waiting]);
    assert.deepEqual(order, ["a start", "a end", "b"]);
    assert.equal(a.size + b.size, 0, "nothing held once done");
    assert.equal((await store.acquireLease(keyOf("s"), "c", 1000)).taken, true, "released");
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() shares the lease within a process and releases it after the last work", async () => {
  const store = new SqliteStore(":memory:");
  try {
    const a = new SessionLeases(store, { owner: "a", ...fast });
    const later = gate();
    let inner: Promise<void> | undefined;
    await a.hold(keyOf("s"), () => {
      // A compaction started by the turn: it joins the turn's lease at once.
      inner = a.hold(keyOf("s"), () => later.promise);
      return Promise.resolve();
    });
    assert.equal(
      (await store.acquireLease(keyOf("s"), "b", 1000)).taken,
      false,
      "still held for the second work",
    );
    later.open();
    await inner;
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, true);
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() renews the lease while work runs past its time", async () => {
  const store = new SqliteStore(":memory:");
  try {
    const a = new SessionLeases(store, { owner: "a", ttlMs: 90, ...fast });
    const taken: boolean[] = [];
    await a.hold(keyOf("s"), async () => {
      for (let i = 0; i < 6; i++) {
        await sleep(50);
        taken.push((await store.acquireLease(keyOf("s"), "b", 90)).taken);
      }
    });
    assert.deepEqual(taken, [false, false, false, false, false, false], "300 ms held on a 90 ms lease");
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() takes a lease whose holder died once it expires", async () => {
  const store = new SqliteStore(":memory:");
  try {
    assert.equal((await store.acquireLease(keyOf("s"), "dead", 150)).taken, true);
    const b = new SessionLeases(store, { owner: "b", ...fast });
    const started = Date.now();
    await b.hold(keyOf("s"), () => Promise.resolve());
    const waited = Date.now() - started;
    assert.ok(waited >= 140 && waited < 1000, `waited ${waited} ms`);
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() aborts the work with LeaseLostError when a renewal finds the lease lost", async () => {
  const store = new SqliteStore(":memory:");
  let lose = false;
  const calls: string[] = [];
  const leaky: LeaseStore = {
    acquireLease: (key, owner, ttl) => store.acquireLease(key, owner, ttl),
    renewLease: (key, owner, ttl) => lose ? Promise.resolve(false) : store.renewLease(key, owner, ttl),
    releaseLease: (key, owner) => (calls.push("release"), store.releaseLease(key, owner)),
  };
  try {
    const a = new SessionLeases(leaky, { owner: "a", ttlMs: 60, ...fast });
    const reason = await a.hold(keyOf("s"), async (signal) => {
      await sleep(30);
      assert.equal(signal.aborted, false, "renewed once");
      lose = true;
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      return signal.reason;
    });
    assert.ok(reason instanceof LeaseLostError, String(reason));
    assert.match(reason.message, /lost the lease of session "s"/);
    assert.deepEqual(calls, [], "a lost lease is not released");
    assert.equal(a.size, 0);
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() gives up waiting when its signal aborts, running nothing and leaving no lease", async () => {
  const store = new SqliteStore(":memory:");
  try {
    (await store.acquireLease(keyOf("s"), "other", 60_000)).taken;
    const b = new SessionLeases(store, { owner: "b", ...fast });
    const stop = new AbortController();
    let ran = false;
    const waiting = b.hold(keyOf("s"), () => Promise.resolve(void (ran = true)), { signal: stop.signal });
    await sleep(30);
    stop.abort(new Error("client gone"));
    await assert.rejects(waiting, /client gone/);
    await sleep(30);
    assert.equal(ran, false);
    assert.equal(b.size, 0);
    await store.releaseLease(keyOf("s"), "other");
    assert.equal(
      (await store.acquireLease(keyOf("s"), "c", 1000)).taken,
      true,
      "b took nothing on its way out",
    );
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() releases the lease when the work throws, and rejects as it did", async () => {
  const store = new SqliteStore(":memory:");
  try {
    const a = new SessionLeases(store, { owner: "a", ...fast });
    await assert.rejects(a.hold(keyOf("s"), () => Promise.reject(new TypeError("bad turn"))), TypeError);
    assert.equal((await store.acquireLease(keyOf("s"), "b", 1000)).taken, true);
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() steps aside after fairShareMs of back-to-back works, so a waiting process gets in", async () => {
  const store = new SqliteStore(":memory:");
  try {
    const a = new SessionLeases(store, { owner: "a", fairShareMs: 100, ...fast });
    const b = new SessionLeases(store, { owner: "b", fairShareMs: 100, ...fast });
    const order: string[] = [];
    const until = Date.now() + 1000;
    // Each process has a queue of works on the session that never empties, as a busy server would.
    const busy = async (leases: SessionLeases, name: string) => {
      while (Date.now() < until) {
        await leases.hold(keyOf("s"), () => sleep(5).then(() => void order.push(name)));
      }
    };
    await Promise.all([busy(a, "a"), busy(b, "b")]);
    // Without stepping aside the first holder keeps the session for the whole second.
    const handovers = order.filter((name, i) => i > 0 && name !== order[i - 1]).length;
    assert.ok(handovers >= 3, `${handovers} handovers: ${order.join("")}`);
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() alone on a session never steps aside, however long it keeps it", async () => {
  const store = new SqliteStore(":memory:");
  try {
    const a = new SessionLeases(store, { owner: "a", fairShareMs: 20, ...fast });
    let works = 0;
    const until = Date.now() + 300;
    while (Date.now() < until) await a.hold(keyOf("s"), () => sleep(2).then(() => void works++));
    assert.ok(works > 20, `${works} works`);
    assert.equal(a.stepsAside, 0, "nobody asked for the lease");
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() lets go of a session kept through overlapping works, so a waiting process gets in", async () => {
  const store = new SqliteStore(":memory:");
  try {
    const a = new SessionLeases(store, { owner: "a", fairShareMs: 100, ...fast });
    const b = new SessionLeases(store, { owner: "b", fairShareMs: 100, ...fast });
    const order: string[] = [];
    const until = Date.now() + 600;
    // A new work of `a` every 5 ms, each 10 ms long, as queued turns and their compactions overlap: the
    // works in flight never drop to none while the load lasts.
    const overlapping = async () => {
      const works: Promise<void>[] = [];
      while (Date.now() < until) {
        works.push(a.hold(keyOf("s"), () => sleep(10).then(() => void order.push("a"))));
        await sleep(5);
      }
      await Promise.all(works);
    };
    const busy = overlapping();
    await sleep(50);
    assert.ok(order.length > 0 && !order.includes("b"), "a holds the session");
    await Promise.all([busy, b.hold(keyOf("s"), () => Promise.resolve(void order.push("b")))]);
    // b got in while a stayed busy, not only once a stopped.
    const at = order.indexOf("b");
    assert.ok(at !== -1 && order.slice(at + 1).includes("a"), order.join(""));
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases rejects durations that cannot work", () => {
  const store = new SqliteStore(":memory:");
  try {
    assert.throws(() => new SessionLeases(store, { ttlMs: 0 }), RangeError);
    assert.throws(() => new SessionLeases(store, { minPollMs: 100, maxPollMs: 10 }), RangeError);
    assert.throws(() => new SessionLeases(store, { fairShareMs: -1 }), RangeError);
  } finally {
    store.close();
  }
});
