/**
 * Sessions, messages and todos as the API's JSON shows them (snake_case, absent fields null): one shape for
 * the sessions routes and the agent's MCP server alike.
 * @module
 */
import type { Session, Todo } from "../store/store.ts";
import type { StoredMessage } from "../types.ts";

/** A session as a list shows it. */
export function sessionListItem(session: Session) {
  return {
    id: session.id,
    title: session.title,
    turn_count: session.turnCount,
    updated_at: session.updatedAt,
  };
}

/** A stored message. */
export function messageJson(message: StoredMessage) {
  return {
    role: message.role,
    content: message.content,
    tool_calls: message.toolCalls ?? null,
    tool_call_id: message.toolCallId ?? null,
    created_at: message.createdAt,
  };
}

/** A todo. */
export function todoJson(todo: Todo) {
  const { id, text, completed, createdAt: created_at, completedAt: completed_at } = todo;
  return { id, text, completed, created_at, completed_at };
}
