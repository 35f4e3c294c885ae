/**
 * `GET /v1/usage?from=&to=`: the caller's tokens by UTC day and model, as the store counted them on every
 * replica, with the daily quota and what is left of it today.
 * @module
 */
import type { UsageEntry } from "../types.ts";
import type { HandlerDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";
import { spentTokens, utcDay } from "../session/quota.ts";
import { costOf, type PriceTable } from "../prices.ts";

/** Days a page covers unless `from` says otherwise: the 30 up to `to`. */
const DEFAULT_DAYS = 30;

const DAY = /^\d{4}-\d{2}-\d{2}$/;

/** A day parameter: `YYYY-MM-DD` that names a real day, else a 400 naming the parameter. */
function dayParam(url: URL, name: string, fallback: string): string {
  const value = url.searchParams.get(name);
  if (value === null) return fallback;
  if (
    !DAY.test(value) || Number.isNaN(Date.parse(`${value}T00:00:00Z`)) || utcDay(new Date(value)) !== value
  ) {
    throw new HttpError(
      400,
      "invalid_query",
      `Cannot read usage: ${name} must be a day as YYYY-MM-DD, got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

/** `cost_usd` of `entries` when there are prices (null for a model without one), else nothing. */
function cost(entries: readonly UsageEntry[], prices: PriceTable | undefined): { cost_usd?: number | null } {
  return prices === undefined || prices.size === 0 ? {} : { cost_usd: costOf(prices, entries) };
}

/**
 * A counted row in the API's spelling, with its total (and cost, with prices): `cached_tokens` are the part of
 * `prompt_tokens` the provider read from its cache, `cache_write_tokens` the part it wrote to it.
 */
function usageRow(entry: UsageEntry, prices: PriceTable | undefined): Record<string, unknown> {
  return {
    model: entry.model,
    prompt_tokens: entry.promptTokens,
    cached_tokens: entry.cachedTokens,
    cache_write_tokens: entry.cacheWriteTokens,
    completion_tokens: entry.completionTokens,
    total_tokens: entry.promptTokens + entry.completionTokens,
    calls: entry.calls,
    estimated_calls: entry.estimatedCalls,
    ...cost([entry], prices),
  };
}

/** Answers the usage of `userId`: a 400 for a malformed day or `from` after `to`. */
export async function handleUsage(request: Request, userId: string, deps: HandlerDeps): Promise<Response> {
  const url = new URL(request.url);
  const now = (deps.agent.now ?? (() => new Date()))();
  const today = utcDay(now);
  const to = dayParam(url, "to", today);
  const from = dayParam(
    url,
    "from",
    utcDay(new Date(Date.parse(`${to}T00:00:00Z`) - (DEFAULT_DAYS - 1) * 864e5)),
  );
  if (from > to) {
    throw new HttpError(400, "invalid_query", `Cannot read usage: from (${from}) is after to (${to})`);
  }
  const { prices } = deps.agent;
  const rows = await deps.store.userUsage(userId, { from, to });
  const days = new Map<string, UsageEntry[]>();
  for (const row of rows) days.set(row.day, [...(days.get(row.day) ?? []), row]);
  const todays = await deps.store.userUsage(userId, { from: today, to: today });
  const spent = spentTokens(todays);
  const limit = deps.dailyTokens ?? null;
  return Response.json({
    user_id: userId,
    from,
    to,
    days: [...days].map(([day, entries]) => ({
      day,
      total_tokens: spentTokens(entries),
      cached_tokens: cachedTokens(entries),
      cache_write_tokens: cacheWriteTokens(entries),
      ...cost(entries, prices),
      models: entries.map((entry) => usageRow(entry, prices)),
    })),
    today: {
      day: today,
      total_tokens: spent,
      cached_tokens: cachedTokens(todays),
      cache_write_tokens: cacheWriteTokens(todays),
      ...cost(todays, prices),
      daily_tokens: limit,
      left: limit === null ? null : Math.max(0, limit - spent),
    },
  });
}

function cachedTokens(entries: readonly UsageEntry[]): number {
  return entries.reduce((sum, e) => sum + e.cachedTokens, 0);
}

function cacheWriteTokens(entries: readonly UsageEntry[]): number {
  return entries.reduce((sum, e) => sum + e.cacheWriteTokens, 0);
}
