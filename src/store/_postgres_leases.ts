/**
 * Session leases on PostgreSQL: which process runs a session's turns, until when. Each operation is one
 * statement, so it is atomic across replicas; expiry is on the database's clock (`now()`), so replicas with
 * skewed clocks agree. Private to `postgres.ts`.
 * @module
 */
import type { Sql } from "./_postgres_client.ts";
import { leaseTtl } from "./store.ts";

/**
 * Takes the lease when it is free, expired or already `owner`'s; true when taken. When another holds it,
 * marks it wanted (one statement either way), so the holder learns at release that someone waits.
 */
export async function acquire(sql: Sql, userId: string, sessionId: string, owner: string, ttlMs: number) {
  leaseTtl(owner, ttlMs, "acquire"); // checks the arguments
  // Inserted, or taken over when expired or the owner's own; a lease held by another is marked wanted.
  const rows = await sql`WITH taken AS (
      INSERT INTO session_leases (user_id, session_id, owner, expires_at)
      VALUES (${userId}, ${sessionId}, ${owner}, now() + ${ttlMs} * interval '1 millisecond')
      ON CONFLICT (user_id, session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at,
        wanted = session_leases.wanted AND session_leases.owner = excluded.owner
      WHERE session_leases.expires_at <= now() OR session_leases.owner = excluded.owner
      RETURNING owner
    ), wanted AS (
      UPDATE session_leases SET wanted = true
      WHERE user_id = ${userId} AND session_id = ${sessionId} AND owner <> ${owner} AND NOT EXISTS (SELECT 1 FROM taken)
    )
    SELECT owner FROM taken`;
  return rows.length === 1;
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
