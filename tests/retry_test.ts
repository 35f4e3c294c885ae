/**
 * retry(), retrySync() and backoffDelay() with a fake delay that records every wait and a fixed random:
 * the exact waits, the attempt count, isRetriable stopping, Retry-After overriding, an abort during a wait.
 */
import assert from "node:assert/strict";
import { backoffDelay, retry, type RetryOptions, retrySync } from "../src/retry.ts";

/** A function that fails `failures` times (errors "fail 1", "fail 2", …), then returns "done". */
function failing(failures: number) {
  const calls: number[] = [];
  const fn = (attempt: number) => {
    calls.push(attempt);
    if (calls.length <= failures) throw new Error(`fail ${calls.length}`);
    return "done";
  };
  return { fn, calls };
}

/** A delay that records each wait and resolves at once. */
function recordingDelay() {
  const waits: number[] = [];
  const delay = (ms: number) => {
    waits.push(ms);
    return Promise.resolve();
  };
  return { delay, waits };
}

Deno.test("retry() waits minTimeout·multiplier^n, capped at maxTimeout, and resolves with the first success", async () => {
  const { fn, calls } = failing(4);
  const { delay, waits } = recordingDelay();
  const value = await retry(fn, { maxAttempts: 6, minTimeout: 100, multiplier: 3, maxTimeout: 1000, delay });
  assert.equal(value, "done");
  assert.deepEqual(calls, [1, 2, 3, 4, 5]);
  assert.deepEqual(waits, [100, 300, 900, 1000]);
});

Deno.test("retry() rejects with the last error itself once maxAttempts have failed", async () => {
  const { fn, calls } = failing(10);
  const { delay, waits } = recordingDelay();
  await assert.rejects(retry(fn, { maxAttempts: 3, minTimeout: 10, delay }), { message: "fail 3" });
  assert.deepEqual(calls, [1, 2, 3]);
  assert.deepEqual(waits, [10, 20]);
});

Deno.test("retry() with the defaults waits 1 s, 2 s, 4 s, 8 s over five attempts, unjittered", async () => {
  const { fn } = failing(10);
  const { delay, waits } = recordingDelay();
  await assert.rejects(retry(fn, { delay, random: () => 0 }), { message: "fail 5" });
  assert.deepEqual(waits, [1000, 2000, 4000, 8000]);
});

Deno.test("retry() stops at the first failure isRetriable refuses, told which attempt failed", async () => {
  const { fn, calls } = failing(10);
  const { delay, waits } = recordingDelay();
  const asked: [string, number][] = [];
  const isRetriable = (error: unknown, attempt: number) => {
    asked.push([(error as Error).message, attempt]);
    return attempt < 2;
  };
  await assert.rejects(retry(fn, { maxAttempts: 5, minTimeout: 1, isRetriable, delay }), {
    message: "fail 2",
  });
  assert.deepEqual(calls, [1, 2]);
  assert.deepEqual(asked, [["fail 1", 1], ["fail 2", 2]]);
  assert.deepEqual(waits, [1]);
});

Deno.test("retry() waits what retryAfter names instead of the backoff, neither jittered nor capped", async () => {
  const { fn } = failing(3);
  const { delay, waits } = recordingDelay();
  const seen: [number, number][] = [];
  const value = await retry(fn, {
    minTimeout: 100,
    maxTimeout: 1000,
    jitter: 0.5,
    random: () => 0,
    // The second failure carries a Retry-After of 5 s; the others have none.
    retryAfter: (_error, attempt) => attempt === 2 ? 5000 : undefined,
    onRetry: (_error, attempt, delayMs) => seen.push([attempt, delayMs]),
    delay,
  });
  assert.equal(value, "done");
  assert.deepEqual(waits, [50, 5000, 200]);
  assert.deepEqual(seen, [[1, 50], [2, 5000], [3, 200]]);
});

Deno.test("retry() throws the failure instead of a wait that would end past maxElapsed, by the injected clock", async () => {
  const { fn, calls } = failing(10);
  let clock = 1000;
  const waits: number[] = [];
  const delay = (ms: number) => {
    waits.push(ms);
    clock += ms;
    return Promise.resolve();
  };
  const options = { maxAttempts: Infinity, minTimeout: 100, maxElapsed: 350, now: () => clock, delay };
  await assert.rejects(retry(fn, options), { message: "fail 3" });
  // 100 ms ends at 100, 200 ms at 300; 400 ms would end at 700, past 350.
  assert.deepEqual(waits, [100, 200]);
  assert.deepEqual(calls, [1, 2, 3]);
});

Deno.test("retry() jitters each wait evenly within backoff·[1 − jitter, 1 + jitter) by the injected random", async () => {
  const { fn } = failing(3);
  const { delay, waits } = recordingDelay();
  const draws = [0, 0.5, 0.75];
  await retry(fn, { minTimeout: 100, multiplier: 2, jitter: 0.25, random: () => draws.shift()!, delay });
  assert.deepEqual(waits, [75, 200, 450]);
  assert.deepEqual(draws, []);
});

Deno.test("retry() rejects with the signal's reason as soon as it aborts during a wait, and tries no more", async () => {
  const controller = new AbortController();
  const reason = new Error("the client went away");
  const { fn, calls } = failing(10);
  // The real abortable wait of a minute: the abort must end it (the test's sanitizers catch a left timer).
  const run = retry(fn, {
    minTimeout: 60_000,
    signal: controller.signal,
    // Aborted from a timer callback, once the wait has begun.
    onRetry: () => setTimeout(() => controller.abort(reason), 0),
  });
  await assert.rejects(run, (error) => error === reason);
  assert.deepEqual(calls, [1]);
});

Deno.test("retry() ends a wait on abort even when the injected delay ignores the signal", async () => {
  const controller = new AbortController();
  const { fn, calls } = failing(10);
  let waiting = 0;
  const run = retry(fn, {
    signal: controller.signal,
    delay: () => {
      waiting++;
      return new Promise<void>(() => {}); // never settles
    },
  });
  await Promise.resolve();
  await Promise.resolve();
  controller.abort(new Error("stop"));
  await assert.rejects(run, { message: "stop" });
  assert.equal(waiting, 1);
  assert.deepEqual(calls, [1]);
});

Deno.test("retry() starts no attempt when the signal has already aborted", async () => {
  const { fn, calls } = failing(0);
  await assert.rejects(retry(fn, { signal: AbortSignal.abort(new Error("too late")) }), {
    message: "too late",
  });
  assert.deepEqual(calls, []);
});

Deno.test("retry() passes the signal to the delay and keeps trying forever with maxAttempts Infinity", async () => {
  const { fn, calls } = failing(20);
  const controller = new AbortController();
  const signals: (AbortSignal | undefined)[] = [];
  const delay = (_ms: number, signal?: AbortSignal) => {
    signals.push(signal);
    return Promise.resolve();
  };
  assert.equal(
    await retry(fn, { maxAttempts: Infinity, minTimeout: 0, signal: controller.signal, delay }),
    "done",
  );
  assert.equal(calls.length, 21);
  assert.equal(signals.length, 20);
  assert.ok(signals.every((signal) => signal === controller.signal));
});

Deno.test("retry() rejects bad options with a RangeError or TypeError naming the option, before any attempt", async () => {
  const bad: [RetryOptions, RegExp, ErrorConstructor][] = [
    [{ maxAttempts: 0 }, /"maxAttempts" must be a whole number of 1 or more, or Infinity, got 0/, RangeError],
    [{ maxAttempts: 1.5 }, /"maxAttempts"/, RangeError],
    [{ minTimeout: -1 }, /"minTimeout" must be a finite number of 0 or more, got -1/, RangeError],
    [{ minTimeout: NaN }, /"minTimeout"/, RangeError],
    [{ multiplier: 0.5 }, /"multiplier" must be a finite number of 1 or more, got 0.5/, RangeError],
    [{ maxTimeout: 0 }, /"maxTimeout" must be a number greater than 0/, RangeError],
    [{ minTimeout: 10, maxTimeout: 5 }, /"minTimeout" \(10\) must not exceed "maxTimeout" \(5\)/, RangeError],
    [{ jitter: 1.5 }, /"jitter" must be a number from 0 to 1, got 1.5/, RangeError],
    [
      { maxElapsed: -1 },
      /"maxElapsed" must be a number of 0 or more \(Infinity for no limit\), got -1/,
      RangeError,
    ],
    [{ isRetriable: "yes" as never }, /"isRetriable" must be a function, got string/, TypeError],
    [{ delay: 5 as never }, /"delay" must be a function, got number/, TypeError],
  ];
  for (const [options, message, type] of bad) {
    const { fn, calls } = failing(0);
    await assert.rejects(retry(fn, options), (error) => error instanceof type && message.test(error.message));
    assert.deepEqual(calls, [], JSON.stringify(options));
  }
});

Deno.test("retry() rejects with a RangeError when retryAfter returns a negative or endless wait", async () => {
  for (const asked of [-1, Infinity, NaN]) {
    const { fn } = failing(1);
    await assert.rejects(
      retry(fn, { retryAfter: () => asked, delay: () => Promise.resolve() }),
      (error) =>
        error instanceof RangeError && /"retryAfter" must return a finite number/.test(error.message),
    );
  }
});

Deno.test("retrySync() follows the same schedule with a blocking delay and rethrows the last error", () => {
  const waits: number[] = [];
  const delay = (ms: number) => void waits.push(ms);
  const ok = failing(2);
  assert.equal(retrySync(ok.fn, { minTimeout: 5, maxTimeout: 8, delay }), "done");
  assert.deepEqual(waits, [5, 8]);
  const never = failing(10);
  assert.throws(() => retrySync(never.fn, { maxAttempts: 2, minTimeout: 5, delay }), { message: "fail 2" });
  assert.deepEqual(never.calls, [1, 2]);
  assert.throws(() => retrySync(ok.fn, { jitter: -1 }), RangeError);
});

Deno.test("backoffDelay() gives the wait before retry n: 50 ms doubling up to 2 s", () => {
  const waits = [0, 1, 2, 5, 6, 10].map((n) => backoffDelay(n, { minTimeout: 50, maxTimeout: 2000 }));
  assert.deepEqual(waits, [50, 100, 200, 1600, 2000, 2000]);
  assert.equal(backoffDelay(1, { minTimeout: 100, jitter: 0.5, random: () => 0.9 }), 280);
  assert.throws(() => backoffDelay(-1), /"retry" must be a whole number of 0 or more, got -1/);
});
