/**
 * Session leases on SQLite: which process runs a session's turns, until when. Each operation runs inside the
 * store's `BEGIN IMMEDIATE` transaction, so it is atomic across processes; expiry is on the store's clock.
 * Private to `sqlite.ts`.
 * @module
 */
import type { Statements } from "./_sqlite_sql.ts";
import { leaseTtl } from "./store.ts";

/** The prepared statements a lease operation runs. */
type LeaseStatements = Pick<Statements, "takeLease" | "renewLease" | "releaseLease" | "wantLease">;

/**
 * Takes the lease when it is free, expired or already `owner`'s; true when taken. When another holds it,
 * marks it wanted, so the holder learns at release that someone waits.
 */
export function acquire(
  sql: LeaseStatements,
  userId: string,
  sessionId: string,
  owner: string,
  ttlMs: number,
  now: Date,
): boolean {
  const at = now.getTime();
  const until = at + leaseTtl(owner, ttlMs, "acquire");
  if (sql.takeLease.run(userId, sessionId, owner, until, at).changes === 1) return true;
  sql.wantLease.run(userId, sessionId, owner);
  return false;
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
