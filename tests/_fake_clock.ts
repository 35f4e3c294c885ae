/**
 * A {@linkcode Clock} that moves only when a test says so: `advance` fires the sleeps that fall due in order,
 * letting the code they wake run to its next wait before the next one fires, so a test asserts exact moments
 * instead of counting work in a wall-clock window.
 * @module
 */
import type { Clock } from "../src/clock.ts";

interface Timer {
  at: number;
  order: number;
  wake: () => void;
}

/**
 * Lets everything that waits on promises alone (no timers of the fake clock) run to its next wait: a task
 * runs only once the microtask queue is empty, and the second covers a task queued by the first.
 */
export async function settle(): Promise<void> {
  for (let i = 0; i < 2; i++) await new Promise((resolve) => setTimeout(resolve, 0));
}

/** A clock that starts at `start` (ms since the epoch) and moves by {@linkcode FakeClock.advance} alone. */
export class FakeClock implements Clock {
  #now: number;
  #timers: Timer[] = [];
  #order = 0;

  constructor(start = 1_700_000_000_000) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  /** The sleeps not yet due. */
  get pending(): number {
    return this.#timers.length;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const timer: Timer = {
        at: this.#now + Math.max(0, ms),
        order: this.#order++,
        wake: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.#timers = this.#timers.filter((t) => t !== timer);
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#timers.push(timer);
    });
  }

  /** Moves the time `ms` on, waking each sleep at its moment (earliest first) and settling after each. */
  async advance(ms: number): Promise<void> {
    const end = this.#now + ms;
    await settle();
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= end)
        .sort((a, b) => a.at - b.at || a.order - b.order)[0];
      if (due === undefined) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = Math.max(this.#now, due.at);
      due.wake();
      await settle();
    }
    this.#now = end;
    await settle();
  }
}
