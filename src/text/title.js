// @ts-check
/**
 * A session's title: named from its first question, or given by its user. The one rule for the server, which
 * stores titles, and the page, which shows the first question's title while the server stores it. Pure.
 * @module
 */

/** The longest title, in characters (code points). */
export const MAX_TITLE_LENGTH = 80;

// Control characters are never part of a title (PostgreSQL's text refuses NUL): each reads as a space.
const CONTROL = /\p{Cc}/gu;

/** @param {string} line */
function tidy(line) {
  return line.replace(CONTROL, " ").replace(/\s+/g, " ").trim();
}

/**
 * A session's title from its first question: the first line with text, its spaces collapsed, at most
 * {@linkcode MAX_TITLE_LENGTH} characters (an ellipsis when cut); empty for a message with no text.
 * @param {string} message
 * @returns {string}
 */
export function titleFrom(message) {
  const line = message.split("\n").map(tidy).find((l) => l !== "") ?? "";
  const chars = [...line];
  return chars.length <= MAX_TITLE_LENGTH ? line : `${chars.slice(0, MAX_TITLE_LENGTH - 1).join("")}…`;
}

/**
 * A title its user gave, trimmed, its spaces (line breaks too) collapsed; empty for a blank one (the session
 * is then named from its first question again).
 * @param {unknown} title
 * @returns {string}
 * @throws {TypeError} when `title` is not a string.
 * @throws {RangeError} when it is longer than {@linkcode MAX_TITLE_LENGTH} characters once trimmed.
 */
export function givenTitle(title) {
  if (typeof title !== "string") {
    const got = title === null ? "null" : Array.isArray(title) ? "array" : typeof title;
    throw new TypeError(`Cannot rename the session: the title must be a string, got ${got}`);
  }
  const clean = tidy(title);
  const length = [...clean].length;
  if (length > MAX_TITLE_LENGTH) {
    throw new RangeError(
      `Cannot rename the session: the title is ${length} characters, at most ${MAX_TITLE_LENGTH} are allowed`,
    );
  }
  return clean;
}
