/**
 * The text rules of a user's memory, pure: how an item is cleaned before it is kept, the key that folds two
 * spellings of one item together, and the search terms a user message gives for recall.
 * @module
 */

/** Longest memory item kept, in characters (a summary item's limit). */
export const MAX_MEMORY_ITEM_CHARS = 200;

/** Most search terms one recall uses: the first ones of the message. */
export const MAX_RECALL_TERMS = 32;

/**
 * The item as it is kept: control characters become spaces, white space collapses, the ends are trimmed.
 * A `RangeError` when nothing is left or it is longer than {@linkcode MAX_MEMORY_ITEM_CHARS}.
 */
export function cleanMemoryText(text: string): string {
  // deno-lint-ignore no-control-regex
  const clean = text.replace(/[\u0000-\u001f\u007f-\u009f]/g, " ").replace(/\s+/g, " ").trim();
  if (clean === "") throw new RangeError("Cannot remember an empty text");
  if (clean.length > MAX_MEMORY_ITEM_CHARS) {
    throw new RangeError(
      `Cannot remember a text of ${clean.length} characters: at most ${MAX_MEMORY_ITEM_CHARS}`,
    );
  }
  return clean;
}

/** The key two items share when they are the same: case and white space ignored (the summary's merge rule). */
export function memoryKey(text: string): string {
  return text.toLowerCase().replace(/\s+/g, " ").trim();
}

/**
 * Words that say nothing about what an item is about: PostgreSQL's `ts_rank` weighs every matching word alike,
 * so without this list "I" or "the" would rank an item as high as its subject.
 */
const STOP_WORDS = new Set(
  ("a an and are as at be but by can do does for from had has have he her his how i if in into is it its me " +
    "my no not of on or our she so that the their them then there these they this to was we were what when " +
    "where which who why will with you your").split(" "),
);

/** The words of `text` as memory indexes and searches them: runs of letters and digits, lower-cased. */
export function memoryWords(text: string): string[] {
  return Array.from(text.toLowerCase().matchAll(/[\p{L}\p{N}]+/gu), ([word]) => word);
}

/**
 * The search terms of `text` for recall: its words ({@linkcode memoryWords}) without stop words, single ASCII
 * letters or digits ("3" in "3+4" says nothing of what an item is about, and matches many) or repeats, at most
 * {@linkcode MAX_RECALL_TERMS}, in the order they first occur. Empty: nothing to recall by.
 */
export function recallTerms(text: string): string[] {
  const terms: string[] = [];
  for (const word of memoryWords(text)) {
    if (STOP_WORDS.has(word) || /^[a-z0-9]$/.test(word) || terms.includes(word)) continue;
    terms.push(word);
    if (terms.length === MAX_RECALL_TERMS) break;
  }
  return terms;
}
