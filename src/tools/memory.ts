/**
 * The `remember` and `forget` tools: the model keeps a fact the user asked it to keep in the user's memory
 * across sessions, or erases one by its id (the ids the [RUNTIME CONTEXT] block's `user_memory` shows).
 * Scoped to the calling user, like `todo` to its session.
 * @module
 */
import { cleanMemoryText, MAX_MEMORY_ITEM_CHARS } from "../store/memory_text.ts";
import type { MemoryStore } from "../store/store.ts";
import type { ToolSpec } from "./registry.ts";

/** The two tools over `store`, keeping at most `limit` items per user (AGENT_USER_MEMORY_ITEMS). */
export function createMemoryTools(store: MemoryStore, limit: number): ToolSpec[] {
  const remember: ToolSpec = {
    name: "remember",
    description: "Keep a fact or preference the user asked you to remember, for this and their later " +
      "sessions. One short statement per call.",
    parameters: {
      type: "object",
      properties: {
        text: { type: "string", description: `the fact, at most ${MAX_MEMORY_ITEM_CHARS} characters` },
      },
      required: ["text"],
      additionalProperties: false,
    },
    // The same text folds into the item it wrote: a call run again adds nothing.
    safeToRepeat: true,
    async handler(args, { sessionId, userId, memoryWritten }) {
      const text = cleanMemoryText(String(args.text));
      const written = await store.remember(userId, { items: [text], limit }, { sessionId });
      memoryWritten?.({ source: "remember", ...written });
      return { item: { id: written.ids[0], text }, added: written.added === 1 };
    },
  };
  const forget: ToolSpec = {
    name: "forget",
    description: "Erase one item of the user's memory by its id (user_memory in the runtime context), " +
      "when the user asks you to forget it or it is no longer true.",
    parameters: {
      type: "object",
      properties: { id: { type: "integer", description: "the item's id" } },
      required: ["id"],
      additionalProperties: false,
    },
    // An item erased once is gone: a call run again erases nothing more.
    safeToRepeat: true,
    async handler(args, { userId, memoryWritten }) {
      const id = args.id as number;
      const removed = await store.forgetMemory(userId, id);
      if (removed === 0) throw new Error(`Cannot forget memory item ${id}: the user has no such item`);
      memoryWritten?.({ source: "forget", ids: [id], added: 0, evicted: 0, removed });
      return { forgotten: id };
    },
  };
  return [remember, forget];
}
