/**
 * The exact tokenizers of OpenAI's models (`AGENT_TOKENIZER=o200k_base|cl100k_base`): `js-tiktoken`, pinned,
 * loaded only when the setting names one, so a user without it needs nothing from a package registry.
 * @module
 */
import type { Tiktoken } from "npm:js-tiktoken@1.0.21/lite";
import type { TokenizerName } from "../types.ts";

/**
 * The package, pinned. Imported through a variable: Deno tries to download a string-literal dynamic import at
 * start-up even when it never runs.
 */
const PACKAGE = "npm:js-tiktoken@1.0.21";

/** How a request's texts are counted: its texts' tokens, and the tokens a provider adds around each message. */
export interface TextCounter {
  /** `per-script` (the built-in estimate) or the encoding's name. */
  name: string;
  count(text: string): number;
  /** Tokens around each message: its role and separators. */
  messageOverhead: number;
}

/**
 * The exact counter for `name` (from Deno's npm cache, or the registry the first time). Messages cost OpenAI's
 * 3 tokens each around their text. Rejects when the package cannot be loaded.
 */
export async function loadTokenizer(name: TokenizerName): Promise<TextCounter> {
  const [lite, ranks] = await Promise.all([
    import(`${PACKAGE}/lite`) as Promise<{ Tiktoken: typeof Tiktoken }>,
    import(`${PACKAGE}/ranks/${name}`),
  ]);
  const encoder = new lite.Tiktoken(ranks.default);
  // Special tokens count as the text they are: a message may quote `<|endoftext|>`.
  return { name, count: (text) => encoder.encode(text, [], []).length, messageOverhead: 3 };
}
