/**
 * How the line editor draws an entry: the escape sequences that redraw it from its first row and put the
 * cursor back, with long lines wrapping at the terminal's width. Pure.
 * @module
 */
import { charWidth, displayWidth, visible } from "./_width.ts";

/** The prompt of an entry's first line. */
export const PROMPT = "you> ";
/** The prompt of its further lines (as wide as {@linkcode PROMPT}). */
export const CONTINUATION = "...> ";
const PROMPT_WIDTH = displayWidth(PROMPT);

/** Where and how to draw. */
export interface DrawOptions {
  /** The row the cursor is on now, counted from the entry's first row. */
  fromRow: number;
  /** The terminal's columns. */
  width: number;
  /** The first line's and the further lines' prompts as drawn (styled), each `promptWidth` columns wide. */
  prompts: [string, string];
  /** The prompts' width on screen. @default {the width of PROMPT} */
  promptWidth?: number;
}

/**
 * The text that redraws `buffer` with the cursor at `cursor`, and the row the cursor is left on. Each line is
 * drawn as {@linkcode visible} shows it (control characters as stand-ins, tabs as spaces) and measured in
 * display columns, so wide characters count 2 and a wide character that does not fit a row's end wraps whole.
 */
export function drawEntry(
  buffer: string,
  cursor: number,
  options: DrawOptions,
): { text: string; row: number } {
  const { fromRow, width, prompts, promptWidth = PROMPT_WIDTH } = options;
  const lines = buffer.split("\n").map(visible);
  const before = buffer.slice(0, cursor).split("\n");
  const line = before.length - 1;
  let text = `\r${fromRow > 0 ? `\x1b[${fromRow}A` : ""}\x1b[0J`;
  text += lines.map((l, i) => prompts[i === 0 ? 0 : 1] + l).join("\r\n");
  // The row each line starts on, and where the cursor goes on its line.
  const starts = [0];
  for (const l of lines) {
    const end = walk(l, width, promptWidth);
    starts.push(starts.at(-1)! + end.row + (end.column > 0 ? 1 : 0));
  }
  const shown = visible(before[line]);
  const at = walk(shown, width, promptWidth);
  const next = [...lines[line].slice(shown.length, shown.length + 2)][0];
  if (next !== undefined && at.column + charWidth(next) > width) [at.row, at.column] = [at.row + 1, 0];
  const row = starts[line] + at.row;
  // A last line that fills its last row leaves the terminal's cursor on that row: move it to the next one.
  const last = walk(lines.at(-1)!, width, promptWidth);
  if (last.column === 0) text += "\r\n";
  const end = starts[lines.length - 1] + last.row;
  if (end > row) text += `\x1b[${end - row}A`;
  text += `\r${at.column > 0 ? `\x1b[${at.column}C` : ""}`;
  return { text, row };
}

/** Where the next character goes after the prompt and `shown` on a terminal `width` columns wide. */
function walk(shown: string, width: number, promptWidth: number): { row: number; column: number } {
  let [row, column] = [0, promptWidth];
  for (const char of shown) {
    const w = charWidth(char);
    if (column + w > width) [row, column] = [row + 1, 0];
    column += w;
  }
  return column >= width ? { row: row + 1, column: 0 } : { row, column };
}
