/**
 * The price table (AGENT_PRICES): dollars per million prompt, completion and cached prompt tokens, by model,
 * and the cost of counted tokens under it. Pure.
 * @module
 */
import type { UsageEntry } from "./types.ts";

/**
 * A model's price: dollars per million tokens in (prompt) and out (completion), and for the prompt tokens the
 * provider read from its cache when it prices them apart (`cached`; absent: at `input`, like the others).
 */
export interface Price {
  input: number;
  output: number;
  cached?: number;
}

/** Prices by model name, as AGENT_PRICES gives them. */
export type PriceTable = ReadonlyMap<string, Price>;

const NUMBER = /^\d+(\.\d+)?$/;

/**
 * The table of `raw`: comma-separated `model=in/out` or `model=in/out/cached`, dollars per million tokens,
 * e.g. `gpt-4o-mini=0.15/0.6/0.075,deepseek-chat=0.27/1.10`; empty gives an empty table. `SyntaxError` naming
 * the entry that is not of that form or names a model twice.
 */
export function parsePrices(raw: string): PriceTable {
  const table = new Map<string, Price>();
  for (const [index, part] of raw.split(",").entries()) {
    const entry = part.trim();
    if (entry === "" && raw.trim() === "") continue;
    const equals = entry.lastIndexOf("=");
    const model = entry.slice(0, equals).trim();
    const [input, output, cached, extra] = entry.slice(equals + 1).split("/").map((n) => n.trim());
    if (
      equals < 1 || model === "" || extra !== undefined || !NUMBER.test(input ?? "") ||
      !NUMBER.test(output ?? "") || (cached !== undefined && !NUMBER.test(cached))
    ) {
      throw new SyntaxError(
        `entry ${index + 1} (${JSON.stringify(entry)}) is not model=in/out or model=in/out/cached, ` +
          "dollars per million tokens",
      );
    }
    if (table.has(model)) throw new SyntaxError(`entry ${index + 1} names model "${model}" a second time`);
    const price: Price = { input: Number(input), output: Number(output) };
    if (cached !== undefined) price.cached = Number(cached);
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
 * model's cached price, the rest of their prompt tokens at its input price (all of them without a cached
 * price), their completion tokens at its output price. Null when one of them has tokens of a model the table
 * has no price for (a partial sum would read as the whole).
 */
export function costOf(table: PriceTable, entries: readonly UsageEntry[]): number | null {
  let dollars = 0;
  for (const entry of entries) {
    if (entry.promptTokens === 0 && entry.completionTokens === 0) continue;
    const price = priceOf(table, entry.model);
    if (price === null) return null;
    // The cached tokens' discount off the input price: none without a cached price.
    const discount = entry.cachedTokens * ((price.cached ?? price.input) - price.input);
    dollars += (entry.promptTokens * price.input + discount + entry.completionTokens * price.output) / 1e6;
  }
  return Math.round(dollars * 1e8) / 1e8;
}
