/**
 * How the line editor draws an entry: the escape sequences that redraw it from its first row and put the
 * cursor back, with long lines wrapping at the terminal's width. Pure.
 * @module
 */

/** The prompt of an entry's first line. */
export const PROMPT = "you> ";
/** The prompt of its further lines (as wide as {@linkcode PROMPT}). */
export const CONTINUATION = "...> ";

/** Where and how to draw. */
export interface DrawOptions {
  /** The row the cursor is on now, counted from the entry's first row. */
  fromRow: number;
  /** The terminal's columns. */
  width: number;
  /** The first line's and the further lines' prompts as drawn (styled), each as wide as {@linkcode PROMPT}. */
  prompts: [string, string];
}

/** The text that redraws `buffer` with the cursor at `cursor`, and the row the cursor is left on. */
export function drawEntry(
  buffer: string,
  cursor: number,
  options: DrawOptions,
): { text: string; row: number } {
  const { fromRow, width, prompts } = options;
  const lines = buffer.split("\n");
  const rows = lines.map((l) => Math.max(1, Math.ceil((PROMPT.length + l.length) / width)));
  let text = `\r${fromRow > 0 ? `\x1b[${fromRow}A` : ""}\x1b[0J`;
  text += lines.map((l, i) => prompts[i === 0 ? 0 : 1] + l).join("\r\n");
  const before = buffer.slice(0, cursor);
  const line = before.split("\n").length - 1;
  const column = PROMPT.length + before.length - (before.lastIndexOf("\n") + 1);
  const row = rows.slice(0, line).reduce((a, b) => a + b, 0) + Math.floor(column / width);
  const end = rows.reduce((a, b) => a + b, 0) - 1;
  if (end > row) text += `\x1b[${end - row}A`;
  text += `\r${column % width > 0 ? `\x1b[${column % width}C` : ""}`;
  return { text, row };
}
