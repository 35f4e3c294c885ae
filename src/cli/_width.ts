/**
 * How many terminal columns text takes, as wcwidth counts them: East-Asian wide and fullwidth characters
 * and emoji take 2, combining marks and zero-width characters 0, the rest 1. And how the line editor shows
 * text it must not send to the terminal as it is: control characters as visible stand-ins, tabs as spaces.
 * Pure.
 * @module
 */
import { stripVTControlCharacters } from "node:util";

/** The wide and fullwidth ranges (East_Asian_Width W and F) outside the emoji, as inclusive pairs. */
const WIDE = [
  [0x1100, 0x115f],
  [0x2329, 0x232a],
  [0x2e80, 0x303e],
  [0x3041, 0x33ff],
  [0x3400, 0x4dbf],
  [0x4e00, 0x9fff],
  [0xa000, 0xa4cf],
  [0xa960, 0xa97f],
  [0xac00, 0xd7a3],
  [0xf900, 0xfaff],
  [0xfe10, 0xfe19],
  [0xfe30, 0xfe6f],
  [0xff00, 0xff60],
  [0xffe0, 0xffe6],
  [0x16fe0, 0x16fe4],
  [0x17000, 0x18cff],
  [0x1b000, 0x1b2ff],
  [0x1f200, 0x1f2ff],
  [0x20000, 0x2fffd],
  [0x30000, 0x3fffd],
] as const;
const EMOJI = /^\p{Emoji_Presentation}$/u;
// Combining marks, format characters (zero-width space and joiner, bidi marks) and Hangul medial vowels.
const ZERO = /^[\p{Mn}\p{Me}\p{Cf}\u1160-\u11ff]$/u;

/** The columns one character (one code point) takes: 0, 1 or 2. Control characters take 0. */
export function charWidth(char: string): number {
  const code = char.codePointAt(0)!;
  if (code < 0x20 || (code >= 0x7f && code < 0xa0)) return 0;
  if (code < 0x300) return 1;
  if (ZERO.test(char)) return 0;
  for (const [from, to] of WIDE) if (code >= from && code <= to) return 2;
  return EMOJI.test(char) ? 2 : 1;
}

/**
 * The columns `text` takes: escape codes (colour's `\x1b[…m`) take none, a tab at most 8 (where it ends
 * depends on where it starts, so it errs wide), other control characters none.
 */
export function displayWidth(text: string): number {
  let columns = 0;
  for (const char of stripVTControlCharacters(text)) columns += char === "\t" ? 8 : charWidth(char);
  return columns;
}

/**
 * `line` (one line, without `\n`) as the editor draws it: each tab as the spaces up to the next multiple of
 * 8 columns from the line's start, a C0 control character or DEL in caret notation (`^[` for ESC, `^C` for
 * `\x03`, `^?` for DEL), a C1 control character as `�`. Nothing in the result moves the cursor or restyles
 * the terminal, and a prefix of `line` shows as a prefix of the result.
 */
export function visible(line: string): string {
  let out = "";
  let columns = 0;
  for (const char of line) {
    const code = char.codePointAt(0)!;
    let shown = char;
    if (char === "\t") shown = " ".repeat(8 - (columns % 8));
    else if (code < 0x20) shown = `^${String.fromCharCode(code + 0x40)}`;
    else if (code === 0x7f) shown = "^?";
    else if (code >= 0x80 && code < 0xa0) shown = "\uFFFD";
    out += shown;
    columns += shown === char ? charWidth(char) : shown.length;
  }
  return out;
}
