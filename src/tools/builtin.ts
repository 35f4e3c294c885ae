/**
 * The runtime's built-in tools, in the order the model is offered them.
 * @module
 */
import { DOCS_DIR } from "../config.ts";
import type { MemoryStore, TodoStore } from "../store/store.ts";
import { calculatorTool } from "./calculator.ts";
import { ToolRegistry, type ToolSource, type ToolSpec } from "./registry.ts";
import { createSearchTool, loadCorpus } from "./search.ts";
import { createTodoTool } from "./todo.ts";
import { createMemoryTools } from "./memory.ts";

/** Options of {@linkcode createBuiltinTools}. */
export interface BuiltinToolsOptions {
  /** The folder of Markdown documents `search_mock` searches. @default {DOCS_DIR} */
  docsDir?: string;
  /** More tools, offered after the built-in ones. @default {[]} */
  extra?: ToolSpec[];
  /** Tools that may change while the process runs (MCP servers'), offered last. @default {[]} */
  sources?: readonly ToolSource[];
  /**
   * AGENT_USER_MEMORY_ITEMS when the user's memory is on: `remember` and `forget` are offered after `todo`,
   * keeping at most this many items per user. @default {null} (off: not offered)
   */
  memoryItems?: number | null;
  /**
   * Where `remember` and `forget` keep the memory, when not in the registry's store (a request's private
   * store is dropped after it; the memory is the server's). @default {the registry's store}
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
  return builtinToolsFor(options)(store);
}

/**
 * What {@linkcode createBuiltinTools} makes, for any store: the corpus is read and indexed once, and each call
 * binds a new registry's `todo` tool to its `store` (a request's private store, say).
 */
export function builtinToolsFor(
  options: BuiltinToolsOptions = {},
): (store: TodoStore & MemoryStore) => ToolRegistry {
  const { docsDir = DOCS_DIR, extra = [], sources = [], memoryItems = null, memoryStore } = options;
  const search = createSearchTool(loadCorpus(docsDir));
  return (store) => {
    const memory = memoryItems === null ? [] : createMemoryTools(memoryStore ?? store, memoryItems);
    return new ToolRegistry([calculatorTool, search, createTodoTool(store), ...memory, ...extra], {
      sources,
    });
  };
}
