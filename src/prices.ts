/**
 * The price table (AGENT_PRICES): dollars per million prompt, completion, cached and cache-written prompt
 * tokens, by model, and the cost of counted tokens under it. Pure.
 * @module
 */
import type { UsageEntry } from "./types.ts";

/**
 * A model's price: dollars per million tokens in (prompt) and out (completion), for the prompt tokens the
 * provider read from its cache when it prices them apart (`cached`; absent: at `input`, like the others), and
 * for those it wrote to its cache (`write`, Anthropic's 1.25 times `input`; absent: at `input`).
 */
export interface Price {
  input: number;
  output: number;
  cached?: number;
  write?: number;
}

/** Prices by model name, as AGENT_PRICES gives them. */
export type PriceTable = ReadonlyMap<string, Price>;

const NUMBER = /^\d+(\.\d+)?$/;

/**
 * The table of `raw`: comma-separated `model=in/out`, `model=in/out/cached` or `model=in/out/cached/write`,
 * dollars per million tokens, e.g. `gpt-4o-mini=0.15/0.6/0.075,claude-sonnet-4-5=3/15/0.30/3.75`; empty gives
 * an empty table. `SyntaxError` naming the entry that is not of that form or names a model twice.
 */
export function parsePrices(raw: string): PriceTable {
  const table = new Map<string, Price>();
  for (const [index, part] of raw.split(",").entries()) {
    const entry = part.trim();
    if (entry === "" && raw.trim() === "") continue;
    const equals = entry.lastIndexOf("=");
    const model = entry.slice(0, equals).trim();
    const [input, output, cached, write, extra] = entry.slice(equals + 1).split("/").map((n) => n.trim());
    if (
      equals < 1 || model === "" || extra !== undefined || !NUMBER.test(input ?? "") ||
      !NUMBER.test(output ?? "") || (cached !== undefined && !NUMBER.test(cached)) ||
      (write !== undefined && !NUMBER.test(write))
    ) {
      throw new SyntaxError(
        `entry ${index + 1} (${JSON.stringify(entry)}) is not model=in/out, model=in/out/cached or ` +
          "model=in/out/cached/write, dollars per million tokens",
      );
    }
    if (table.has(model)) throw new SyntaxError(`entry ${index + 1} names model "${model}" a second time`);
    const price: Price = { input: Number(input), output: Number(output) };
    if (cached !== undefined) price.cached = Number(cached);
    if (write !== undefined) price.write = Number(write);
    table.set(model, price);
  }
  return table;
}

/**
 * The price of `model`: its own entry, else the longest entry that starts its name followed by `-`, `:`, `@`
 * or `.` (a provider's dated or tagged name, `gpt-4o-mini-2024-07-18` under `gpt-4o-mini`); null when none.
 */
export function priceOf(table: PriceTable, model: string): Price | null {
  const exact = table.get(model);
  if (exact !== undefined) return exact;
  let best: string | null = null;
  for (const name of table.keys()) {
    if (
      model.startsWith(name) && /[-:@.]/.test(model[name.length] ?? "") && name.length > (best?.length ?? 0)
    ) {
      best = name;
    }
  }
  return best === null ? null : table.get(best)!;
}

/**
 * The cost in dollars of `entries`, rounded to the millionth of a cent: their cached prompt tokens at the
 * model's cached price, those written to the cache at its write price, the rest of their prompt tokens at its
 * input price (as are the cached or written ones without a price of their own), their completion tokens at its
 * output price. Null when one of them has tokens of a model the table has no price for (a partial sum would
 * read as the whole).
 */
export function costOf(table: PriceTable, entries: readonly UsageEntry[]): number | null {
  let dollars = 0;
  for (const entry of entries) {
    if (entry.promptTokens === 0 && entry.completionTokens === 0) continue;
    const price = priceOf(table, entry.model);
    if (price === null) return null;
    const { cachedTokens: cached, cacheWriteTokens: written } = entry;
    const uncached = entry.promptTokens - cached - written;
    const prompt = uncached * price.input + cached * (price.cached ?? price.input) +
      written * (price.write ?? price.input);
    dollars += (prompt + entry.completionTokens * price.output) / 1e6;
  }
  return Math.round(dollars * 1e8) / 1e8;
}
