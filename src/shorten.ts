/**
 * The one way to cut text for display: errors, the REPL's tool lines, summaries and trace payloads quote
 * long text through {@linkcode shorten}.
 * @module
 */

/** Options of {@linkcode shorten}. */
export interface ShortenOptions {
  /**
   * Collapse every run of white space to one space (and trim) first, so the text fits on one line.
   * @default {false}
   */
  oneLine?: boolean;
  /**
   * What marks the cut; a function gets the number of characters cut off.
   * @default {"…"}
   */
  marker?: string | ((cut: number) => string);
  /**
   * Whether `max` counts the marker too (the result is at most `max` long) or the kept text only.
   * @default {false}
   */
  withinMax?: boolean;
}

/** `text` cut to `max` characters with a marker where it was cut; unchanged when it fits. */
export function shorten(text: string, max: number, options: ShortenOptions = {}): string {
  const { oneLine = false, marker = "…", withinMax = false } = options;
  const flat = oneLine ? text.replace(/\s+/g, " ").trim() : text;
  if (flat.length <= max) return flat;
  const keep = withinMax && typeof marker === "string" ? Math.max(0, max - marker.length) : max;
  return flat.slice(0, keep) + (typeof marker === "string" ? marker : marker(flat.length - keep));
}
