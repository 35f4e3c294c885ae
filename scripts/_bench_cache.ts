/**
 * The bench's cache section: one long session in each wire format (`LLM_API`) against an in-process fake that
 * answers by rule and counts cached tokens by the provider's rules (see `PromptCache`), compaction on. Per
 * format: the share of input tokens read from the cache after turn 2, the input cost per turn under a public
 * price table, and the same for a client that sends the same requests without breakpoints or cache key.
 * @module
 */
import { answer } from "./_fake_provider.ts";
import {
  type Api,
  API_PATHS,
  MIN_CACHED_TOKENS,
  PromptCache,
  ruleMessages,
  tokensOf,
  wholeReply,
} from "./_fake_wires.ts";
import { makeTempDir } from "./_bench_process.ts";
import { openBenchRuntime } from "./_bench_turns.ts";

/** Dollars per million input tokens: uncached, read from the cache, written to it (public price lists). */
const PRICES: Record<Api, { model: string; input: number; read: number; write: number }> = {
  chat: { model: "gpt-5", input: 1.25, read: 0.125, write: 1.25 },
  anthropic: { model: "claude-sonnet-4-5", input: 3, read: 0.3, write: 3.75 },
  responses: { model: "gpt-5", input: 1.25, read: 0.125, write: 1.25 },
};

/** One format's figures. */
export interface CacheRow {
  api: Api;
  model: string;
  /** Model requests after turn 2, summaries included. */
  requests: number;
  /** Of their input tokens, the share read from the cache. */
  cachedShare: number;
  /** The same without breakpoints or cache key. */
  baselineCachedShare: number;
  /** Input dollars per turn after turn 2, and for the baseline. */
  inputCostPerTurn: number;
  baselineInputCostPerTurn: number;
  compactions: number;
  /**
   * Requests after turn 2 with less than half their input read from the cache (summaries included), of those
   * long enough to be cached at all.
   */
  uncachedRequests: number;
  /**
   * Requests after turn 2 the cache could not yet hold: shorter than the provider's minimum cacheable prompt,
   * or the first one long enough (nothing before it was cached).
   */
  coldRequests: number;
}

/** The cache section's result: a row per format. */
export interface CacheResult {
  turns: number;
  rows: CacheRow[];
}

function strip(body: Record<string, unknown>): Record<string, unknown> {
  const { prompt_cache_key: _, ...rest } = body;
  return JSON.parse(JSON.stringify(rest, (key, value) => key === "cache_control" ? undefined : value));
}

/** User messages of a long session: arithmetic (a tool call) and chat of some length, by turn. */
function message(turn: number): string {
  if (turn % 3 === 0) return `what is ${turn} * ${turn + 7}?`;
  return `Note ${turn}: ${"the meeting moved to Thursday and the budget needs a second look; ".repeat(3)}`;
}

async function measureApi(api: Api, turns: number): Promise<CacheRow> {
  const dir = await makeTempDir("bench-cache-");
  const price = PRICES[api];
  const [cache, baseline] = [new PromptCache(api), new PromptCache(api)];
  let turn = 0;
  const counted = { input: 0, read: 0, written: 0, base: 0, baseRead: 0, requests: 0, uncached: 0, cold: 0 };
  let warm = false;
  const cost = { main: 0, base: 0 };
  const fetch: typeof globalThis.fetch = (_input, init) => {
    const body = JSON.parse(String(init?.body));
    const { message: reply } = answer({ messages: ruleMessages(api, body) });
    const usage = cache.count(body);
    const base = baseline.count(strip(body));
    if (turn > 2) {
      counted.requests++;
      counted.input += usage.input;
      counted.read += usage.read;
      counted.base += base.input;
      counted.baseRead += base.read;
      if (usage.input < MIN_CACHED_TOKENS || !warm) counted.cold++;
      else if (usage.read < usage.input / 2) counted.uncached++;
      warm ||= usage.input >= MIN_CACHED_TOKENS;
      const uncached = usage.input - usage.read - usage.written;
      cost.main += (uncached * price.input + usage.read * price.read + usage.written * price.write) / 1e6;
      cost.base += ((base.input - base.read - base.written) * price.input + base.read * price.read +
        base.written * price.write) / 1e6;
    }
    const calls =
      ((reply.tool_calls ?? []) as { id: string; function: { name: string; arguments: string } }[])
        .map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments }));
    const decision = { content: (reply.content ?? null) as string | null, calls };
    const output = tokensOf(reply);
    const sent = wholeReply(api, price.model, decision, { ...usage, output }, "cache");
    return Promise.resolve(Response.json(sent));
  };
  const runtime = openBenchRuntime(dir.path, "http://127.0.0.1:9/v1", { fetch, api, userMemory: false });
  try {
    for (turn = 1; turn <= turns; turn++) {
      const result = await runtime.turn("cache", message(turn));
      if (result.outcome !== "answered") {
        throw new Error(`turn ${turn} (${api}) ended ${result.outcome}: ${result.failure?.message}`);
      }
      await runtime.idle();
    }
  } finally {
    await runtime.close();
    await dir.remove();
  }
  const measured = turns - 2;
  return {
    api,
    model: price.model,
    requests: counted.requests,
    cachedShare: counted.read / counted.input,
    baselineCachedShare: counted.baseRead / counted.base,
    inputCostPerTurn: cost.main / measured,
    baselineInputCostPerTurn: cost.base / measured,
    compactions: runtime.compactions.ok,
    uncachedRequests: counted.uncached,
    coldRequests: counted.cold,
  };
}

/** The cache section: `turns` turns of one session in each format, in turn. */
export async function measureCache(
  turns = 200,
  apis: readonly Api[] = Object.keys(API_PATHS) as Api[],
): Promise<CacheResult> {
  const rows: CacheRow[] = [];
  for (const api of apis) rows.push(await measureApi(api, turns));
  return { turns, rows };
}

if (import.meta.main) {
  const apis = Deno.args[1]?.split(",") as Api[] | undefined;
  console.log(JSON.stringify(await measureCache(Number(Deno.args[0] ?? 200), apis), null, 2));
}
