/**
 * The trace route's opaque cursor: the next event's file (by inode, which survives rotation) and byte
 * offset, so a cursor stays valid across server restarts for as long as its file exists.
 * @module
 */

/** Where a page starts: the next event's file (by inode, which survives rotation) and byte offset. */
export interface TraceCursor {
  ino: number;
  offset: number;
}

/** Encodes a cursor as opaque URL-safe text. */
export function encodeTraceCursor(cursor: TraceCursor): string {
  // Digits and colons never encode to "+" or "/", so the text needs no escaping in a query string.
  return btoa(`t1:${cursor.ino}:${cursor.offset}`).replaceAll("=", "");
}

/** Decodes {@linkcode encodeTraceCursor}'s text. @throws {SyntaxError} when the text is not a cursor. */
export function decodeTraceCursor(text: string): TraceCursor {
  let plain = "";
  try {
    plain = atob(text);
  } catch {
    // Not base64: reported below.
  }
  const match = /^t1:(\d{1,15}):(\d{1,15})$/.exec(plain);
  if (match === null) throw new SyntaxError(`Cannot read cursor "${text.slice(0, 40)}": not a trace cursor`);
  return { ino: Number(match[1]), offset: Number(match[2]) };
}
