/**
 * Session leases on PostgreSQL: which process runs a session's turns, until when. Each operation is one
 * statement, so it is atomic across replicas; expiry is on the database's clock (`now()`), so replicas with
 * skewed clocks agree. Private to `postgres.ts`.
 * @module
 */
import type { Sql } from "./_postgres_client.ts";
import { type AcquireLeaseOptions, leaseFrom, type LeaseTake, leaseTtl } from "./store.ts";

/**
 * Takes the lease when it is free, expired, already `owner`'s or `options.from`'s. When another holds it,
 * marks it wanted, so the holder learns at release that someone waits, and answers who that is. One
 * statement: the row is locked and read as committed last, so the take is a compare-and-set on its holder.
 */
export async function acquire(
  sql: Sql,
  key: { userId: string; sessionId: string; owner: string },
  ttlMs: number,
  options?: AcquireLeaseOptions,
): Promise<LeaseTake> {
  const { userId, sessionId, owner } = key;
  leaseTtl(owner, ttlMs, "acquire"); // checks the arguments
  const from = leaseFrom(options) ?? null;
  // Every conflict updates the row (to itself when it is not ours to take), so RETURNING names its holder.
  const rows = await sql`INSERT INTO session_leases (user_id, session_id, owner, expires_at)
    VALUES (${userId}, ${sessionId}, ${owner}, now() + ${ttlMs} * interval '1 millisecond')
    ON CONFLICT (user_id, session_id) DO UPDATE SET
      owner = CASE WHEN session_leases.expires_at <= now() OR session_leases.owner = excluded.owner
        OR session_leases.owner = ${from} THEN excluded.owner ELSE session_leases.owner END,
      expires_at = CASE WHEN session_leases.expires_at <= now() OR session_leases.owner = excluded.owner
        OR session_leases.owner = ${from} THEN excluded.expires_at ELSE session_leases.expires_at END,
      wanted = CASE WHEN session_leases.expires_at <= now() OR session_leases.owner = excluded.owner
        OR session_leases.owner = ${from} THEN session_leases.wanted AND session_leases.owner = excluded.owner
        ELSE true END
    RETURNING owner`;
  const holder = String(rows[0]?.owner);
  return holder === owner ? { taken: true } : { taken: false, holder };
}

/** Extends the lease while `owner` holds it (expired but not taken counts: nobody else ran); else false. */
export async function renew(sql: Sql, userId: string, sessionId: string, owner: string, ttlMs: number) {
  leaseTtl(owner, ttlMs, "renew"); // checks the arguments
  const rows = await sql`UPDATE session_leases SET expires_at = now() + ${ttlMs} * interval '1 millisecond'
    WHERE user_id = ${userId} AND session_id = ${sessionId} AND owner = ${owner} RETURNING owner`;
  return rows.length === 1;
}

/** Frees the lease if `owner` holds it; true when another owner asked for it meanwhile. */
export async function release(sql: Sql, userId: string, sessionId: string, owner: string): Promise<boolean> {
  leaseTtl(owner, 1, "release"); // checks the owner
  const rows = await sql`DELETE FROM session_leases
    WHERE user_id = ${userId} AND session_id = ${sessionId} AND owner = ${owner} RETURNING wanted`;
  return rows[0]?.wanted === true;
}
