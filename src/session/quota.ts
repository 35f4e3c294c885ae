/**
 * The daily token quota of a user (AGENT_USER_DAILY_TOKENS), read from the store's counts, so every replica on
 * one database sees the same total: a turn asked for once the user's tokens of the UTC day reached it gets
 * 429 `quota_exceeded`, with `Retry-After` at the next UTC midnight.
 * @module
 */
import { QuotaExceededError } from "../errors.ts";
import type { UsageStore } from "../store/store.ts";
import type { UsageEntry } from "../types.ts";

/** The UTC day of `at`, `YYYY-MM-DD`, as the store counts it. */
export function utcDay(at: Date): string {
  return at.toISOString().slice(0, 10);
}

/** Prompt + completion tokens of `entries`, cached prompt tokens included: what the daily quota counts. */
export function spentTokens(entries: readonly UsageEntry[]): number {
  return entries.reduce((sum, entry) => sum + entry.promptTokens + entry.completionTokens, 0);
}

/**
 * Throws the 429 `quota_exceeded` when `userId` has spent `limit` tokens or more on the UTC day it is now
 * (null: no quota, and the clock is not read). A turn that starts under the limit runs to its end, so a day's total can pass the limit
 * by what one turn spends (AGENT_MAX_TURN_TOKENS bounds that).
 */
export async function checkDailyQuota(
  store: Pick<UsageStore, "userUsage">,
  userId: string,
  limit: number | null,
  now: () => Date,
): Promise<void> {
  if (limit === null) return;
  const at = now();
  const day = utcDay(at);
  const spent = spentTokens(await store.userUsage(userId, { from: day, to: day }));
  if (spent < limit) return;
  // Whole seconds to the next UTC midnight, at least 1.
  const next = Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate() + 1);
  const wait = Math.max(1, Math.ceil((next - at.getTime()) / 1000));
  const message = `Cannot start a turn: user "${userId}" has spent ${spent} tokens today (UTC), ` +
    `the daily quota is ${limit} (AGENT_USER_DAILY_TOKENS); it starts again at 00:00 UTC, in ${wait} s`;
  throw new QuotaExceededError(message, wait);
}
