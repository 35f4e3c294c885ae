/**
 * The PostgreSQL store's todo rows: added, listed and completed for one session, their text kept as bytes.
 * Private to `postgres.ts`.
 * @module
 */
import { bytes, toTodo } from "./_rows.ts";
import type { Sql, Tx } from "./_postgres_client.ts";
import type { Todo } from "./store.ts";

/** The largest todo id the `integer` column holds: a larger one names no todo. */
const MAX_TODO_ID = 2 ** 31 - 1;

/** Adds an open todo to the session inside the caller's transaction; resolves to it. */
export async function insertTodo(
  tx: Tx,
  userId: string,
  sessionId: string,
  text: string,
  now: () => Date,
): Promise<Todo> {
  const rows = await tx`INSERT INTO todos (user_id, session_id, text, created_at)
    VALUES (${userId}, ${sessionId}, ${bytes(text)}, ${now().toISOString()})
    RETURNING id, text, completed, created_at, completed_at`;
  return toTodo(rows[0]);
}

/** The session's todos, oldest first. */
export async function selectTodos(sql: Sql, userId: string, sessionId: string): Promise<Todo[]> {
  const rows = await sql`SELECT id, text, completed, created_at, completed_at FROM todos
    WHERE user_id = ${userId} AND session_id = ${sessionId} ORDER BY id`;
  return rows.map(toTodo);
}

/** Marks todo `id` completed (first completion time kept); resolves to it, or null when the session has none. */
export async function completeTodo(
  tx: Tx,
  userId: string,
  sessionId: string,
  id: number,
  now: () => Date,
): Promise<Todo | null> {
  if (!Number.isInteger(id) || id < 1 || id > MAX_TODO_ID) return null;
  const rows = await tx`UPDATE todos SET completed = 1,
      completed_at = COALESCE(completed_at, ${now().toISOString()})
    WHERE id = ${id} AND user_id = ${userId} AND session_id = ${sessionId}
    RETURNING id, text, completed, created_at, completed_at`;
  return rows.length === 0 ? null : toTodo(rows[0]);
}
