/**
 * The PostgreSQL store's message rows: written as bytes inside the caller's transaction, in the list's order,
 * with the session's turn count and time following them; read back in that order. Private to `postgres.ts`.
 * @module
 */
import type { StoredMessage } from "../types.ts";
import { bytes, type Row, toMessage, toRow } from "./_rows.ts";
import type { Sql, Tx } from "./_postgres_client.ts";

/** The session's messages, oldest first. */
export async function readMessages(sql: Sql, userId: string, sessionId: string): Promise<StoredMessage[]> {
  const rows = await sql`SELECT id, role, content, tool_calls, tool_call_id, created_at FROM messages
    WHERE user_id = ${userId} AND session_id = ${sessionId} ORDER BY seq`;
  return rows.map(toMessage);
}

/** Inserts the new ones of `messages` inside the caller's transaction; resolves to how many were new. */
export async function insertMessages(
  tx: Tx,
  userId: string,
  sessionId: string,
  messages: readonly StoredMessage[],
  now: () => Date,
): Promise<number> {
  // All checked before the first insert: a malformed message changes nothing.
  const rows = messages.map(toRow);
  // Sent together (pipelined) and run in order, so the read order is the list's.
  const inserted = await Promise.all(
    rows.map(([id, role, content, calls, callId, createdAt]) =>
      tx`INSERT INTO messages (user_id, session_id, id, role, content, tool_calls, tool_call_id, created_at)
      VALUES (${userId}, ${sessionId}, ${bytes(id)}, ${role}, ${bytes(content)}, ${calls}, ${bytes(callId)},
        ${bytes(createdAt)})
      ON CONFLICT (user_id, session_id, id) DO NOTHING RETURNING role`
    ),
  );
  const added = inserted.filter((result) => result.length === 1);
  const turns = added.filter((result) => result[0].role === "user").length;
  if (added.length > 0) await touchSession(tx, userId, sessionId, turns, now);
  return added.length;
}

/** Adds `turns` (negative: removes) to the session's turn count and stamps it updated now. */
export async function touchSession(
  tx: Tx,
  userId: string,
  sessionId: string,
  turns: number,
  now: () => Date,
): Promise<void> {
  await tx`UPDATE sessions SET turn_count = turn_count + ${turns}, updated_at = ${now().toISOString()}
    WHERE user_id = ${userId} AND id = ${sessionId}`;
}

/** Deletes the session's message `id`; resolves to its row (`role`), or undefined when not stored. */
export async function deleteMessage(
  tx: Tx,
  userId: string,
  sessionId: string,
  id: string,
): Promise<Row | undefined> {
  const rows = await tx`DELETE FROM messages
    WHERE user_id = ${userId} AND session_id = ${sessionId} AND id = ${bytes(id)} RETURNING role`;
  return rows[0];
}
