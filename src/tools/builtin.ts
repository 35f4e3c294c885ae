/**
 * The runtime's built-in tools, in the order the model is offered them.
 * @module
 */
import { DOCS_DIR } from "../config.ts";
import type { MemoryStore, TodoStore } from "../store/store.ts";
import { calculatorTool } from "./calculator.ts";
import { ToolRegistry, type ToolRegistryOptions, type ToolSpec } from "./registry.ts";
import { createSearchTool, loadCorpus } from "./search.ts";
import { createTodoTool } from "./todo.ts";
import { createMemoryTools } from "./memory.ts";

/** Options of {@linkcode createBuiltinTools}: the registry's `sources` (MCP servers'), and the built-ins'. */
export interface BuiltinToolsOptions extends Pick<ToolRegistryOptions, "sources"> {
  /** The folder of Markdown documents `search_mock` searches. @default {DOCS_DIR} */
  docsDir?: string;
  /** More tools, offered after the built-in ones. @default {[]} */
  extra?: ToolSpec[];
  /**
   * AGENT_USER_MEMORY_ITEMS when the user's memory is on: `remember` and `forget` are offered after `todo`,
   * keeping at most this many items per user. @default {null} (off: not offered)
   */
  memoryItems?: number | null;
  /**
   * Where `remember` and `forget` keep the memory (the server's store, also for a request's private session).
   * Required with `memoryItems` for {@linkcode builtinToolsFor}. @default {the store of createBuiltinTools}
   */
  memoryStore?: MemoryStore;
}

/**
 * A registry of `calculator`, `search_mock` (over the docs corpus), `todo` (over `store`) and, with
 * `memoryItems`, `remember` and `forget`.
 */
export function createBuiltinTools(
  store: TodoStore & MemoryStore,
  options: BuiltinToolsOptions = {},
): ToolRegistry {
  return builtinToolsFor({ memoryStore: store, ...options })(store);
}

/**
 * What {@linkcode createBuiltinTools} makes, for any todos: the corpus is read and indexed once, and each call
 * binds a new registry's `todo` tool to its `todos` (a request's private ones, say).
 * @throws {TypeError} for `memoryItems` without `memoryStore`
 */
export function builtinToolsFor(options: BuiltinToolsOptions = {}): (todos: TodoStore) => ToolRegistry {
  const { docsDir = DOCS_DIR, extra = [], sources = [], memoryItems = null, memoryStore } = options;
  if (memoryItems !== null && memoryStore === undefined) {
    throw new TypeError("Cannot build the built-in tools: memoryItems needs the memoryStore they keep to");
  }
  const search = createSearchTool(loadCorpus(docsDir));
  const memory = memoryItems === null ? [] : createMemoryTools(memoryStore!, memoryItems);
  return (todos) =>
    new ToolRegistry([calculatorTool, search, createTodoTool(todos), ...memory, ...extra], { sources });
}
