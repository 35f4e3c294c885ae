/**
 * Session leases on SQLite: which process runs a session's turns, until when. Each operation runs inside the
 * store's `BEGIN IMMEDIATE` transaction, so it is atomic across processes; expiry is on the store's clock.
 * Private to `sqlite.ts`.
 * @module
 */
import type { Statements } from "./_sqlite_sql.ts";
import { type AcquireLeaseOptions, leaseFrom, type LeaseTake, leaseTtl } from "./store.ts";

/** The prepared statements a lease operation runs. */
type LeaseStatements = Pick<Statements, "takeLease" | "renewLease" | "releaseLease" | "wantLease">;

/**
 * Takes the lease when it is free, expired, already `owner`'s or `options.from`'s. When another holds it,
 * marks it wanted, so the holder learns at release that someone waits, and answers who that is.
 */
export function acquire(
  sql: LeaseStatements,
  key: { userId: string; sessionId: string; owner: string },
  ttlMs: number,
  now: Date,
  options?: AcquireLeaseOptions,
): LeaseTake {
  const { userId, sessionId, owner } = key;
  const at = now.getTime();
  const until = at + leaseTtl(owner, ttlMs, "acquire");
  const from = leaseFrom(options) ?? null;
  if (sql.takeLease.run(userId, sessionId, owner, until, at, from).changes === 1) return { taken: true };
  // Inside the store's transaction: not taken means a row of another owner is there.
  const holder = sql.wantLease.get(userId, sessionId, owner)?.owner;
  return { taken: false, holder: String(holder) };
}

/** Extends the lease while `owner` holds it (expired but not taken counts: nobody else ran); else false. */
export function renew(
  sql: LeaseStatements,
  userId: string,
  sessionId: string,
  owner: string,
  ttlMs: number,
  now: Date,
): boolean {
  const until = now.getTime() + leaseTtl(owner, ttlMs, "renew");
  return sql.renewLease.run(until, userId, sessionId, owner).changes === 1;
}

/** Frees the lease if `owner` holds it; true when another owner asked for it meanwhile. */
export function release(sql: LeaseStatements, userId: string, sessionId: string, owner: string): boolean {
  return sql.releaseLease.get(userId, sessionId, owner)?.wanted === 1;
}
