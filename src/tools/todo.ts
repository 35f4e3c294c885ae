/**
 * The `todo` tool: a session's task list, kept in the store's `todos` table (the source of truth).
 * @module
 */
import type { TodoStore } from "../store/store.ts";
import type { ToolSpec } from "./registry.ts";

/** Longest todo text accepted. */
export const MAX_TODO_TEXT_CHARS = 500;

/** The `todo` tool over `store`, scoped to the calling session. */
export function createTodoTool(store: TodoStore): ToolSpec {
  return {
    name: "todo",
    description:
      "Manage this session's todo list. action=add needs text; action=list shows all todos; action=complete needs the id of an open or done todo.",
    parameters: {
      type: "object",
      properties: {
        action: { type: "string", enum: ["add", "list", "complete"] },
        text: { type: "string", description: "the todo text, for add" },
        id: { type: "integer", description: "the todo id, for complete" },
      },
      required: ["action"],
      additionalProperties: false,
    },
    // A repeated call id adds nothing (see TodoStore.addTodo); list reads; complete keeps its first time.
    safeToRepeat: true,
    async handler(args, { sessionId, userId, callId }) {
      const key = { userId, sessionId };
      switch (args.action) {
        case "add": {
          const text = typeof args.text === "string" ? args.text.trim() : "";
          if (text === "") throw new Error('Cannot add a todo: "text" must be a non-empty string');
          if (text.length > MAX_TODO_TEXT_CHARS) {
            throw new Error(
              `Cannot add a todo: text is ${text.length} characters, at most ${MAX_TODO_TEXT_CHARS}`,
            );
          }
          return { todo: await store.addTodo(key, text, { callId }) };
        }
        case "complete": {
          if (typeof args.id !== "number") throw new Error('Cannot complete a todo: "id" is required');
          const todo = await store.completeTodo(key, args.id);
          if (todo === null) {
            const open = (await store.listTodos(key)).map((t) => t.id);
            throw new Error(
              `Cannot complete todo ${args.id}: no such todo in this session` +
                (open.length > 0 ? ` (ids: ${open.join(", ")})` : " (the list is empty)"),
            );
          }
          return { todo };
        }
        default:
          return { todos: await store.listTodos(key) };
      }
    },
  };
}
