/**
 * A process's hold on sessions: work on a session (a turn, its resumption, a delete, a compaction) runs only
 * while this process holds the session's lease in the store, so two processes never interleave one session.
 * Built on the three lease methods of {@linkcode LeaseStore} alone, so every store works the same.
 * @module
 */
import { abortable, abortError } from "../abort.ts";
import { type Clock, SYSTEM_CLOCK } from "../clock.ts";
import { LeaseLostError } from "../errors.ts";
import {
  CANCEL_MARK,
  type LeaseStore,
  processOwner,
  type SessionKey,
  sessionName,
  UNKNOWN_HOST,
} from "../store/store.ts";

/** Options of {@linkcode SessionLeases}. */
export interface SessionLeasesOptions {
  /** How long a lease lasts unless renewed, in milliseconds (AGENT_SESSION_LEASE_SECONDS). @default {30000} */
  ttlMs?: number;
  /** This process's id in the lease table; each acquisition adds a number to it. @default {processOwner()} */
  owner?: string;
  /** First pause between tries for a busy lease, in milliseconds; it doubles up to `maxPollMs`. @default {25} */
  minPollMs?: number;
  /** Longest pause between tries for a busy lease, in milliseconds. @default {100} */
  maxPollMs?: number;
  /**
   * Longest time this process keeps a session through back-to-back or overlapping works before it lets go once
   * (later works wait for a new take); it then pauses for a waiting process to get in if one asked for the
   * lease meanwhile (a failed take marks it wanted; the release reports it). Nobody waiting, no pause.
   * @default {2000}
   */
  fairShareMs?: number;
  /**
   * Whether the process that wrote `owner` (a {@linkcode processOwner} of this host, not this process) is gone,
   * asked when such a process holds a lease this process wants: true takes the lease at once. It must answer
   * false when it cannot tell (the lease then expires). Not asked when this process does not know its host.
   * @default {() => false}
   */
  processGone?: (owner: string) => boolean;
  /** The time, the pauses between tries and the renewal waits. @default {SYSTEM_CLOCK} */
  clock?: Clock;
  /** A number in [0, 1) for the jitter of the pauses between tries. @default {Math.random} */
  random?: () => number;
}

/** Options of {@linkcode SessionLeases.hold}. */
export interface HoldOptions {
  /** Stops the wait for a busy lease (`hold` rejects with its reason); passed on to the work. @default {undefined} */
  signal?: AbortSignal;
  /** Called once if the lease is busy, before waiting for it. @default {undefined} */
  onWait?: () => void;
  /**
   * Called when another process (or this one) asks, through the lease, that the session's work be cancelled
   * ({@linkcode SessionLeases.cancel}) while this work runs: at the renewal that finds the mark. Must not throw.
   * @default {undefined} (the work is not cancelled that way)
   */
  onCancel?: () => void;
}

/** One lease this process holds or is taking, shared by everything of this process on that session. */
interface Held {
  key: SessionKey;
  owner: string;
  /** Works running or waiting on it; the lease is released when the last one ends. */
  count: number;
  /** Resolves once the lease is taken; rejects when everyone stopped waiting first. */
  taken: Promise<void>;
  /** Aborted when the lease is lost (the works' signal) or given up. */
  stop: AbortController;
  /** Whether a try found the lease busy: a work joining now is told it waits. */
  waiting: boolean;
  /** This process's estimate of the expiry (its own clock), for a renewal that fails to reach the store. */
  expiresAt: number;
  /** Since when this process has held the session through back-to-back works. */
  streakStart: number;
  /** When this take got the lease: overlapping works let go once it is `fairShareMs` old. */
  since: number;
  /** Resolves once released (or given up): a take that waits for its turn behind this one. */
  done: Promise<void>;
  finished: () => void;
  /** The renewal loop, running while the lease is held; it ends when `stop` aborts. */
  renewing?: Promise<void>;
  /** The `onCancel` of the works running on it. */
  cancels: Set<() => void>;
}

/** A lease holder's process (its owner without the acquisition number) and host; null when not one of ours. */
function holderProcess(holder: string): { host: string; process: string } | null {
  const match = /^(([^:]+):\d+:\d+:[0-9a-f]{8}):\d+(?:!cancel)?$/.exec(holder);
  return match === null ? null : { process: match[1], host: match[2] };
}

/**
 * Runs work on a session under its lease. Works of one process on one session share the lease (the caller
 * orders them, as the HTTP queue does); another process's wait until it is released or expires. While held,
 * the lease is renewed every third of its time; when a renewal finds it lost, the works' signal aborts with a
 * {@linkcode LeaseLostError}.
 */
export class SessionLeases {
  readonly #store: LeaseStore;
  readonly #options: Required<SessionLeasesOptions>;
  readonly #held = new Map<string, Held>();
  /** Releases under way, by session: a new acquisition waits for the last one's. */
  readonly #releasing = new Map<string, Promise<void>>();
  #stepsAside = 0;
  /** Sessions released lately: when, and since when they had been held back to back. */
  readonly #released = new Map<string, { at: number; streakStart: number; wanted: boolean }>();
  #acquisitions = 0;
  /** This process's host as its owner names it; undefined when unknown. */
  readonly #host: string | undefined;

  /** @throws {RangeError} when a duration is not a finite number > 0, or the polls are out of order. */
  constructor(store: LeaseStore, options: SessionLeasesOptions = {}) {
    const { ttlMs = 30_000, owner = processOwner(), minPollMs = 25, maxPollMs = 100 } = options;
    const { fairShareMs = 2000, processGone = () => false, clock = SYSTEM_CLOCK, random = Math.random } =
      options;
    for (const [name, value] of Object.entries({ ttlMs, minPollMs, maxPollMs, fairShareMs })) {
      if (!(value > 0) || !Number.isFinite(value)) {
        throw new RangeError(
          `Cannot create SessionLeases: ${name} must be a finite number > 0, got ${value}`,
        );
      }
    }
    if (maxPollMs < minPollMs) {
      throw new RangeError(
        `Cannot create SessionLeases: maxPollMs (${maxPollMs}) must be >= minPollMs (${minPollMs})`,
      );
    }
    this.#store = store;
    this.#options = { ttlMs, owner, minPollMs, maxPollMs, fairShareMs, processGone, clock, random };
    const host = /^([^:]+):\d+:\d+:[0-9a-f]{8}$/.exec(owner)?.[1];
    this.#host = host === UNKNOWN_HOST ? undefined : host;
  }

  /** How many times this process paused to let a waiting process take a session it kept. */
  get stepsAside(): number {
    return this.#stepsAside;
  }

  /** Sessions this process holds or is taking a lease of. */
  get size(): number {
    return this.#held.size;
  }

  /**
   * Runs `work` once this process holds the session's lease (at once when it already does), and settles as
   * it does; the lease is released when the last work of this process on the session has ended. `work`'s
   * signal aborts with `options.signal` or with a {@linkcode LeaseLostError}. Rejects without running `work`
   * when `options.signal` aborts while waiting, or when the store fails to take the lease.
   */
  hold<T>(key: SessionKey, work: (signal: AbortSignal) => Promise<T>, options: HoldOptions = {}): Promise<T> {
    const { signal, onWait, onCancel } = options;
    if (signal?.aborted) return Promise.reject(abortError(signal, "Waiting for the session's lease"));
    const name = sessionName(key);
    let held = this.#held.get(name);
    // None yet, or kept too long through overlapping works: a new take, which waits for the running ones.
    if (
      held === undefined ||
      (held.count > 0 && this.#options.clock.now() - held.since >= this.#options.fairShareMs)
    ) {
      held = this.#take(key, name, onWait, held?.done);
      this.#held.set(name, held);
    } else if (held.waiting) onWait?.();
    // Counted at once, before any await: a compaction started by a running turn keeps its lease.
    held.count++;
    return this.#run(name, held, work, signal, onCancel);
  }

  /**
   * Asks whoever holds the session's lease, this process or another, to cancel the work it runs on it (the
   * works that gave an `onCancel`): the lease is marked in the store, and its holder sees the mark at its next
   * renewal, within a third of `ttlMs`. Resolves to true when a live lease was marked, false when none is
   * held; rejects when the store does.
   */
  cancel(key: SessionKey): Promise<boolean> {
    return this.#store.cancelLease(key);
  }

  async #run<T>(
    name: string,
    held: Held,
    work: (signal: AbortSignal) => Promise<T>,
    signal: AbortSignal | undefined,
    onCancel: (() => void) | undefined,
  ): Promise<T> {
    try {
      await abortable(held.taken, [signal]);
      const stops = signal === undefined ? [held.stop.signal] : [signal, held.stop.signal];
      if (onCancel !== undefined) held.cancels.add(onCancel);
      return await work(AbortSignal.any(stops));
    } finally {
      if (onCancel !== undefined) held.cancels.delete(onCancel);
      if (--held.count === 0) await this.#letGo(name, held);
    }
  }

  /**
   * Starts taking the lease (after `after`, a hold of this process still running): tries, then waits with a
   * growing pause (jittered) until it is free.
   */
  #take(key: SessionKey, name: string, onWait?: () => void, after?: Promise<void>): Held {
    const { promise: done, resolve: finished } = Promise.withResolvers<void>();
    const held: Held = {
      key,
      owner: `${this.#options.owner}:${++this.#acquisitions}`,
      count: 0,
      taken: Promise.resolve(),
      stop: new AbortController(),
      waiting: false,
      expiresAt: 0,
      streakStart: this.#options.clock.now(),
      since: Number.POSITIVE_INFINITY,
      done,
      finished,
      cancels: new Set(),
    };
    held.taken = (async () => {
      await after;
      await this.#releasing.get(name);
      const streakGoesOn = await this.#stepAside(name, held);
      let pause = this.#options.minPollMs;
      for (;;) {
        const started = this.#options.clock.now();
        const take = await this.#store.acquireLease(key, held.owner, this.#options.ttlMs);
        if (take.taken || await this.#takeFromGone(key, held.owner, take.holder)) {
          held.expiresAt = started + this.#options.ttlMs;
          held.since = this.#options.clock.now();
          // A streak starts when the lease is taken, not when the wait for it began.
          if (!streakGoesOn) held.streakStart = held.since;
          held.renewing = this.#renew(name, held);
          return;
        }
        if (!held.waiting) {
          held.waiting = true;
          onWait?.();
        }
        await this.#options.clock.sleep(pause * (0.75 + this.#options.random() / 2), held.stop.signal);
        pause = Math.min(pause * 2, this.#options.maxPollMs);
      }
    })();
    // Awaited by every work; this only keeps a give-up nobody waits for from being reported as unhandled.
    held.taken.catch(() => {});
    return held;
  }

  /**
   * Takes the lease from `holder` when it is a process of this host that is gone (a compare-and-set on that
   * holder: of two processes doing this only one gets it); false when it runs or this cannot tell.
   */
  async #takeFromGone(key: SessionKey, owner: string, holder: string): Promise<boolean> {
    const other = holderProcess(holder);
    // Our own process's other take (the one before a fair-share handover) is never gone.
    if (other === null || other.host !== this.#host || other.process === this.#options.owner) return false;
    let gone = false;
    try {
      gone = this.#options.processGone(other.process);
    } catch {
      // Cannot tell: the lease expires.
    }
    return gone && (await this.#store.acquireLease(key, owner, this.#options.ttlMs, { from: holder })).taken;
  }

  /**
   * Taken again right after a release, the session stays this process's: after `fairShareMs` of that, if
   * another process asked for it meanwhile, wait long enough for every waiting process to try once (a
   * jittered poll is at most 1.25 × `maxPollMs`). True when the take goes on with the last one's streak.
   */
  async #stepAside(name: string, held: Held): Promise<boolean> {
    const released = this.#released.get(name);
    this.#released.delete(name);
    const now = this.#options.clock.now();
    if (released === undefined || now - released.at > this.#options.maxPollMs) return false;
    if (now - released.streakStart < this.#options.fairShareMs || !released.wanted) {
      held.streakStart = released.streakStart;
      return true;
    }
    this.#stepsAside++;
    await this.#options.clock.sleep(
      this.#options.maxPollMs * 1.25 + this.#options.minPollMs,
      held.stop.signal,
    );
    return false;
  }

  /**
   * Renews the lease every third of its time until `held.stop` aborts (released, or lost: then the works'
   * signal aborts with a {@linkcode LeaseLostError}). A renewal the store does not answer keeps the lease
   * while it cannot have expired before the next try.
   */
  async #renew(name: string, held: Held): Promise<void> {
    const every = this.#options.ttlMs / 3;
    for (;;) {
      try {
        await this.#options.clock.sleep(every, held.stop.signal);
      } catch {
        return; // released or given up
      }
      const started = this.#options.clock.now();
      let kept: boolean;
      let cause: unknown;
      try {
        kept = await this.#store.renewLease(held.key, held.owner, this.#options.ttlMs) ||
          await this.#takeBackCancelled(held);
        if (kept) held.expiresAt = started + this.#options.ttlMs;
      } catch (error) {
        cause = error;
        kept = this.#options.clock.now() + every < held.expiresAt;
      }
      if (held.stop.signal.aborted) return; // given up meanwhile
      if (kept) continue;
      if (this.#held.get(name) === held) this.#held.delete(name);
      held.stop.abort(new LeaseLostError(held.key.sessionId, { cause }));
      return;
    }
  }

  /**
   * Whether the lease, not renewed under its owner, is still this process's under the cancel mark
   * ({@linkcode SessionLeases.cancel}): then it is renewed, taken back under its owner (a compare-and-set, so
   * a later cancel marks it anew) and the running works' `onCancel` are called. False when it was lost.
   */
  async #takeBackCancelled(held: Held): Promise<boolean> {
    const marked = held.owner + CANCEL_MARK;
    if (!await this.#store.renewLease(held.key, marked, this.#options.ttlMs)) return false;
    const take = await this.#store.acquireLease(held.key, held.owner, this.#options.ttlMs, { from: marked });
    if (!take.taken) return false;
    for (const cancel of held.cancels) cancel();
    return true;
  }

  /** After the last work: stops renewing and releases the lease (unless lost); a new take waits for it. */
  #letGo(name: string, held: Held): Promise<void> {
    if (this.#held.get(name) === held) this.#held.delete(name);
    const lost = held.stop.signal.aborted;
    held.stop.abort(new Error("released"));
    const release = (async () => {
      const taken = await held.taken.then(() => true, () => false);
      await held.renewing; // ends at once: `stop` aborted above
      // A failed release is not an error of the work: the lease expires by itself.
      if (!taken || lost) return;
      const wanted = await this.#store.releaseLease(held.key, held.owner).catch(() => false);
      const at = this.#options.clock.now();
      this.#released.set(name, { at, streakStart: held.streakStart, wanted });
      // Only the last moments matter: older entries go once there are many.
      if (this.#released.size <= 256) return;
      for (const [other, released] of this.#released) {
        if (at - released.at > this.#options.maxPollMs) this.#released.delete(other);
      }
    })().finally(held.finished);
    this.#releasing.set(name, release);
    return release.finally(() => {
      if (this.#releasing.get(name) === release) this.#releasing.delete(name);
    });
  }
}
