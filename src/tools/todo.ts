/**
 * The `todo` tool: a session's task list, kept in the store's `todos` table (the source of truth), or for a
 * request's private session in memory.
 * @module
 */
import type { SessionKey, Todo, TodoStore } from "../store/store.ts";
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

/**
 * The todos of a request's private session (the OpenAI-compatible route without a session id), kept in memory
 * and dropped with it, by the store's rules: a call id adds once, a completion keeps its first time.
 */
export class RequestTodos implements TodoStore {
  readonly #todos: (Todo & { callId: string | null })[] = [];
  readonly #now: () => Date;

  /** @param now The clock of the todos' times. @default {() => new Date()} */
  constructor(now: () => Date = () => new Date()) {
    this.#now = now;
  }

  addTodo(_key: SessionKey, text: string, options: { callId?: string } = {}): Promise<Todo> {
    const { callId = null } = options;
    const known = callId === null ? undefined : this.#todos.find((todo) => todo.callId === callId);
    if (known !== undefined) return Promise.resolve(copy(known));
    const todo = {
      id: this.#todos.length + 1,
      text,
      completed: false,
      createdAt: this.#now().toISOString(),
      completedAt: null,
      callId,
    };
    this.#todos.push(todo);
    return Promise.resolve(copy(todo));
  }

  listTodos(_key: SessionKey): Promise<Todo[]> {
    return Promise.resolve(this.#todos.map(copy));
  }

  completeTodo(_key: SessionKey, id: number): Promise<Todo | null> {
    const todo = this.#todos.find((known) => known.id === id);
    if (todo === undefined) return Promise.resolve(null);
    todo.completed = true;
    todo.completedAt ??= this.#now().toISOString();
    return Promise.resolve(copy(todo));
  }
}

function copy({ id, text, completed, createdAt, completedAt }: Todo): Todo {
  return { id, text, completed, createdAt, completedAt };
}
