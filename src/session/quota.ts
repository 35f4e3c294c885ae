/**
 * The daily token quota of a user (AGENT_USER_DAILY_TOKENS), read from the store's counts, so every replica on
 * one database sees the same total: a turn asked for once the user's tokens of the UTC day reached it gets
 * 429 `quota_exceeded`, with `Retry-After` at the next UTC midnight.
 * @module
 */
import { QuotaExceededError } from "../errors.ts";
import type { UsageStore } from "../store/store.ts";

/** The UTC day of `at`, `YYYY-MM-DD`, as the store counts it. */
export function utcDay(at: Date): string {
  return at.toISOString().slice(0, 10);
}

/** Whole seconds from `at` to the next UTC midnight, at least 1. */
export function secondsToNextUtcDay(at: Date): number {
  const next = Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate() + 1);
  return Math.max(1, Math.ceil((next - at.getTime()) / 1000));
}

/**
 * The tokens (prompt + completion, cached prompt tokens included) `userId` has spent on the UTC day of `at`,
 * over every model.
 */
export async function tokensOfDay(
  store: Pick<UsageStore, "userUsage">,
  userId: string,
  at: Date,
): Promise<number> {
  const day = utcDay(at);
  const rows = await store.userUsage(userId, { from: day, to: day });
  return rows.reduce((sum, row) => sum + row.promptTokens + row.completionTokens, 0);
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
  const spent = await tokensOfDay(store, userId, at);
  if (spent < limit) return;
  const wait = secondsToNextUtcDay(at);
  const message = `Cannot start a turn: user "${userId}" has spent ${spent} tokens today (UTC), ` +
    `the daily quota is ${limit} (AGENT_USER_DAILY_TOKENS); it starts again at 00:00 UTC, in ${wait} s`;
  throw new QuotaExceededError(message, wait);
}
