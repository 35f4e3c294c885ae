/**
 * `/v1/memory`: the caller's memory across sessions, to list (`GET`) and erase, one item (`DELETE
 * /v1/memory/{id}`) or all (`DELETE /v1/memory`). Sessions are not touched, as deleting a session does not
 * touch the memory.
 * @module
 */
import type { MemoryItem, MemoryStore } from "../store/store.ts";
import { HttpError } from "./errors.ts";

/** An item in the API's spelling. */
function itemBody(item: MemoryItem): Record<string, unknown> {
  return {
    id: item.id,
    text: item.text,
    source_session: item.sourceSession,
    first_seen: item.firstSeen,
    last_seen: item.lastSeen,
    last_used: item.lastUsed,
    use_count: item.useCount,
  };
}

/** `GET /v1/memory`: the user's items, oldest first. */
export async function listMemory(store: MemoryStore, userId: string): Promise<Response> {
  const items = await store.listMemory(userId);
  return Response.json({ user_id: userId, items: items.map(itemBody) });
}

/**
 * `DELETE /v1/memory/{id}` (`id` given) or `DELETE /v1/memory`: 204 once the item is gone, 404 when the user has
 * no such item, 400 for an id that is not a whole number; erasing all answers 200 `{deleted}`.
 */
export async function forgetMemory(store: MemoryStore, userId: string, id?: string): Promise<Response> {
  if (id === undefined) return Response.json({ deleted: await store.forgetMemory(userId) });
  const n = Number(id);
  if (!/^\d{1,10}$/.test(id) || n < 1) {
    throw new HttpError(
      400,
      "invalid_id",
      `Invalid memory item id ${JSON.stringify(id.slice(0, 40))}: expected a whole number of 1 or more`,
    );
  }
  if (await store.forgetMemory(userId, n) === 0) {
    throw new HttpError(404, "not_found", `Memory item ${n} not found`);
  }
  return new Response(null, { status: 204 });
}
