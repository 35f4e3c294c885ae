import assert from "node:assert/strict";
import { QueueFullError } from "../src/errors.ts";
import { toHttpError } from "../src/http/errors.ts";
import { SessionQueue } from "../src/session/queue.ts";

/** `error` as the HTTP API answers it. */
const asHttp = (error: unknown) => toHttpError(error, (line) => assert.fail(`logged: ${line}`));

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A task that runs until `release()` is called, recording when it started. */
function gate(log: string[], name: string) {
  const { promise, resolve } = Promise.withResolvers<string>();
  let started = false;
  return {
    get started() {
      return started;
    },
    release: () => resolve(name),
    task: () => {
      started = true;
      log.push(`start ${name}`);
      return promise.then((value) => {
        log.push(`end ${name}`);
        return value;
      });
    },
  };
}

/** A small deterministic pseudo-random sequence, so a failure can be replayed. */
function randomDelays(count: number, seed = 7): number[] {
  let state = seed;
  return Array.from({ length: count }, () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state % 6;
  });
}

Deno.test("SessionQueue.run() runs 20 tasks of one key one at a time in submission order", async () => {
  const queue = new SessionQueue({ maxWaiting: 32 });
  const spans: { index: number; start: number; end: number }[] = [];
  let clock = 0;
  let running = 0;
  const delays = randomDelays(20);
  const results = await Promise.all(delays.map((delay, index) =>
    queue.run("s", async () => {
      running++;
      assert.equal(running, 1, "never two at once");
      const start = clock++;
      await sleep(delay);
      spans.push({ index, start, end: clock++ });
      running--;
      return index;
    })
  ));
  assert.deepEqual(results, delays.map((_, index) => index));
  assert.deepEqual(spans.map((span) => span.index), delays.map((_, index) => index));
  for (let i = 1; i < spans.length; i++) assert.ok(spans[i].start > spans[i - 1].end, `task ${i} overlapped`);
  assert.equal(queue.size, 0);
  assert.equal(queue.active, 0);
});

Deno.test("SessionQueue.run() runs tasks of different keys concurrently", async () => {
  const queue = new SessionQueue();
  const log: string[] = [];
  const a = gate(log, "a");
  const b = gate(log, "b");
  const first = queue.run("A", a.task);
  const second = queue.run("B", b.task);
  assert.equal(queue.active, 2, "both started without waiting for each other");
  assert.equal(queue.waiting("A"), 0);
  b.release();
  assert.equal(await second, "b");
  a.release();
  assert.equal(await first, "a");
  assert.deepEqual(log, ["start a", "start b", "end b", "end a"]);
});

Deno.test("SessionQueue.run() rejects a 9th waiting task with 429 and Retry-After", async () => {
  const queue = new SessionQueue();
  const log: string[] = [];
  const running = gate(log, "running");
  const turns = [queue.run("s", running.task)];
  for (let i = 0; i < 8; i++) turns.push(queue.run("s", () => Promise.resolve(`w${i}`)));
  assert.equal(queue.active, 1);
  assert.equal(queue.waiting("s"), 8);

  let started = false;
  const rejected = queue.run("s", () => {
    started = true;
    return Promise.resolve("too many");
  });
  await assert.rejects(rejected, (error: unknown) => {
    assert.ok(error instanceof QueueFullError);
    assert.equal(error.scope, "session");
    assert.equal(error.message, "Cannot queue turn: the session already has 8 turns waiting");
    const http = asHttp(error);
    assert.equal(http.status, 429);
    assert.equal(http.code, "too_many_requests");
    assert.equal(http.message, error.message);
    assert.equal(http.headers["Retry-After"], String(error.retryAfterSeconds));
    assert.match(http.headers["Retry-After"], /^[1-9]\d*$/);
    return true;
  });
  assert.equal(queue.waiting("s"), 8, "the rejected task took no slot");
  assert.equal(await queue.run("other", () => Promise.resolve("free")), "free", "other keys are unaffected");

  running.release();
  assert.deepEqual(await Promise.all(turns), ["running", "w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"]);
  assert.equal(started, false);
  assert.equal(queue.size, 0);
});

Deno.test("SessionQueue.run() honours a custom maxWaiting, including 0", async () => {
  const queue = new SessionQueue({ maxWaiting: 0 });
  const running = gate([], "r");
  const turn = queue.run("s", running.task);
  await assert.rejects(queue.run("s", () => Promise.resolve(1)), QueueFullError);
  running.release();
  await turn;
  assert.throws(() => new SessionQueue({ maxWaiting: -1 }), RangeError);
  assert.throws(() => new SessionQueue({ maxWaiting: 1.5 }), RangeError);
});

Deno.test("SessionQueue.run() holds turns of 1024 sessions at most; one more session's turn gets 503", async () => {
  const queue = new SessionQueue();
  const running = Array.from({ length: 1024 }, (_, i) => gate([], `s${i}`));
  const turns = running.map((g, i) => queue.run(`s${i}`, g.task));
  // Sessions already in the queue may still queue turns behind their running one.
  const waiting = queue.run("s0", () => Promise.resolve("waited"));
  assert.equal(queue.size, 1024);
  await assert.rejects(queue.run("one-more", () => Promise.resolve("no")), (error: unknown) => {
    assert.ok(error instanceof QueueFullError);
    assert.equal(error.scope, "process");
    assert.equal(error.message, "Cannot queue turn: turns of 1024 sessions are running or waiting");
    const http = asHttp(error);
    assert.equal(http.status, 503);
    assert.equal(http.code, "server_busy");
    assert.match(http.headers["Retry-After"], /^[1-9]\d*$/);
    return true;
  });
  assert.equal(queue.rejection("one-more")?.scope, "process");
  running[5].release();
  await turns[5];
  assert.equal(queue.rejection("one-more"), null);
  assert.equal(await queue.run("one-more", () => Promise.resolve("now")), "now");
  for (const g of running) g.release();
  await Promise.all([...turns, waiting]);
  assert.equal(queue.size, 0);
  assert.throws(() => new SessionQueue({ maxKeys: 0 }), RangeError);
});

Deno.test("SessionQueue.run() drops a waiting task whose signal aborts; the rest run in order", async () => {
  const queue = new SessionQueue();
  const log: string[] = [];
  const first = gate(log, "first");
  const dropped = gate(log, "dropped");
  const third = gate(log, "third");
  const controller = new AbortController();
  const turns = [
    queue.run("s", first.task),
    queue.run("s", dropped.task, { signal: controller.signal }),
    queue.run("s", third.task),
  ];
  assert.equal(queue.waiting("s"), 2);

  controller.abort();
  await assert.rejects(
    turns[1],
    (error: unknown) => error instanceof DOMException && error.name === "AbortError",
  );
  assert.equal(queue.waiting("s"), 1, "removed from the queue at once");

  first.release();
  await turns[0];
  third.release();
  assert.equal(await turns[2], "third");
  assert.equal(dropped.started, false);
  assert.deepEqual(log, ["start first", "end first", "start third", "end third"]);
  assert.equal(queue.size, 0);
});

Deno.test("SessionQueue.run() never starts a task whose signal is already aborted", async () => {
  const queue = new SessionQueue();
  const reason = new Error("client disconnected");
  let started = false;
  const task = () => {
    started = true;
    return Promise.resolve();
  };
  await assert.rejects(
    queue.run("s", task, { signal: AbortSignal.abort(reason) }),
    (error) => error === reason,
  );
  assert.equal(started, false, "not started even though the key was free");
  assert.equal(queue.size, 0);
});

Deno.test("SessionQueue.run() ignores an abort once the task has started", async () => {
  const queue = new SessionQueue();
  const controller = new AbortController();
  const running = gate([], "running");
  const turn = queue.run("s", running.task, { signal: controller.signal });
  controller.abort();
  running.release();
  assert.equal(await turn, "running");
});

Deno.test("SessionQueue.run() keeps going after a task that rejects or throws", async () => {
  const queue = new SessionQueue();
  const order: string[] = [];
  const failing = queue.run("s", async () => {
    await sleep(1);
    order.push("failing");
    throw new Error("model down");
  });
  const throwing = queue.run("s", () => {
    order.push("throwing");
    throw new TypeError("sync bug");
  });
  const next = queue.run("s", () => {
    order.push("next");
    return Promise.resolve("ok");
  });
  await assert.rejects(failing, /model down/);
  await assert.rejects(throwing, TypeError);
  assert.equal(await next, "ok");
  assert.deepEqual(order, ["failing", "throwing", "next"]);
  assert.equal(queue.active, 0);
  assert.equal(queue.size, 0);
  assert.equal(queue.waiting("s"), 0);
});
