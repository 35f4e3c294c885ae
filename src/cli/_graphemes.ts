/**
 * Where the line editor's cursor may stop: between user-perceived characters (grapheme clusters), so Left,
 * Right, Backspace and Delete never split a surrogate pair (an emoji), a letter from its combining accents,
 * or a joined emoji sequence. Pure.
 * @module
 */

const SEGMENTER = new Intl.Segmenter(undefined, { granularity: "grapheme" });
/** How far around the cursor to look: more than any real grapheme cluster, so a long paste costs nothing. */
const WINDOW = 64;

/** The boundary before `at` in `text` (0 at its start). */
export function previousBoundary(text: string, at: number): number {
  if (at <= 0) return 0;
  const from = Math.max(0, at - WINDOW);
  let last = from;
  for (const { index } of SEGMENTER.segment(text.slice(from, at))) last = from + index;
  // A cluster cut by the window's start could begin inside a surrogate pair: never stop there.
  return isLowSurrogate(text, last) ? last - 1 : last;
}

/** The boundary after `at` in `text` (its length at its end). */
export function nextBoundary(text: string, at: number): number {
  if (at >= text.length) return text.length;
  const first = SEGMENTER.segment(text.slice(at, at + WINDOW))[Symbol.iterator]().next().value!;
  const end = at + first.segment.length;
  return isLowSurrogate(text, end) ? end + 1 : end;
}

/** `at` if it is a boundary between code points in `text`, else the one before it. */
export function codePointStart(text: string, at: number): number {
  return isLowSurrogate(text, at) ? at - 1 : at;
}

/** Whether `text[at]` is the second half of a surrogate pair. */
function isLowSurrogate(text: string, at: number): boolean {
  const code = text.charCodeAt(at), before = text.charCodeAt(at - 1);
  return code >= 0xdc00 && code <= 0xdfff && before >= 0xd800 && before <= 0xdbff;
}
