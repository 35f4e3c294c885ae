/**
 * Reading a JSON request body under a byte limit and an idle timeout, never holding more than the limit
 * (plus one chunk) in memory, whatever `Content-Length` claims.
 * @module
 */
import { abortable, abortError } from "../abort.ts";
import { chunkReader, DEFAULT_CHUNK_BYTES } from "../chunk_reader.ts";
import { HttpError } from "./errors.ts";
import { isRecord, jsonType } from "../_json.ts";

/** Options of {@linkcode readJsonBody}. */
export interface ReadJsonBodyOptions {
  /** Largest body accepted, in bytes; one more byte is a 413. Required. */
  maxBytes: number;
  /** Stops the read with its reason when it aborts; `request.signal` is watched too. @default {undefined} */
  signal?: AbortSignal;
  /** Longest wait for the next chunk, in milliseconds, before a 408. @default {10_000} */
  idleTimeoutMs?: number;
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/**
 * `request`'s body parsed as JSON. Rejects with an `HttpError`: 415 unless the Content-Type is
 * `application/json`; 413 when `Content-Length` or the bytes received pass `maxBytes`; 408 when no chunk
 * arrives for `idleTimeoutMs`; 400 `invalid_json` for an empty body, invalid UTF-8 or malformed JSON. With a
 * signal's reason when one aborts, and an `AbortError` (its `cause` the stream's error) when the body stream
 * fails. Every rejection cancels the body and leaves no timer or listener behind.
 * @throws {RangeError} when `maxBytes` is not a non-negative integer or `idleTimeoutMs` is not positive.
 */
export async function readJsonBody(request: Request, options: ReadJsonBodyOptions): Promise<unknown> {
  const { maxBytes, signal, idleTimeoutMs = 10_000 } = options;
  if (!Number.isInteger(maxBytes) || maxBytes < 0) {
    throw new RangeError(
      `Cannot read request body: maxBytes must be a non-negative integer, got ${maxBytes}`,
    );
  }
  if (!(idleTimeoutMs > 0)) {
    throw new RangeError(`Cannot read request body: idleTimeoutMs must be positive, got ${idleTimeoutMs}`);
  }
  const contentType = request.headers.get("content-type");
  if (contentType?.split(";", 1)[0].trim().toLowerCase() !== "application/json") {
    await cancelBody(request);
    const actual = contentType ?? "missing";
    const message = `Cannot read request body: Content-Type is ${actual}, expected application/json`;
    throw new HttpError(415, "unsupported_media_type", message);
  }
  const declared = request.headers.get("content-length");
  if (declared !== null && /^\d+$/.test(declared.trim()) && Number(declared) > maxBytes) {
    await cancelBody(request);
    throw tooLarge(`it is ${Number(declared)} bytes`, maxBytes);
  }
  const signals = signal === undefined ? [request.signal] : [request.signal, signal];
  const bytes = await readLimited(request, maxBytes, signals, idleTimeoutMs);
  if (bytes.byteLength === 0) throw invalidJson("it is empty");
  let text: string;
  try {
    text = decoder.decode(bytes);
  } catch (error) {
    throw invalidJson("it is not valid UTF-8", error);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw invalidJson((error as Error).message, error);
  }
}

/**
 * The `message` field of a parsed body, untrimmed; a 400 `invalid_body` unless the body is an object whose
 * `message` is a string with more than whitespace.
 */
export function messageField(body: unknown): string {
  const invalid = (why: string) => new HttpError(400, "invalid_body", `Cannot read message: ${why}`);
  if (!isRecord(body)) throw invalid(`the request body must be a JSON object, got ${jsonType(body)}`);
  if (!Object.hasOwn(body, "message")) throw invalid('field "message" is missing');
  const message = body.message;
  if (typeof message !== "string") {
    throw invalid(`field "message" must be a string, got ${jsonType(message)}`);
  }
  if (message.trim() === "") throw invalid('field "message" is empty');
  return message;
}

/** `body` when it is a JSON object with `field`, else a 400 `invalid_body` that `action` (the route's) begins. */
export function bodyWith(body: unknown, field: string, action: string): Record<string, unknown> {
  if (isRecord(body) && Object.hasOwn(body, field)) return body;
  throw new HttpError(400, "invalid_body", `${action}: the body must be a JSON object with "${field}"`);
}

function invalidJson(why: string, cause?: unknown): HttpError {
  return new HttpError(400, "invalid_json", `Cannot parse request body as JSON: ${why}`, { cause });
}

function tooLarge(size: string, maxBytes: number): HttpError {
  return new HttpError(
    413,
    "payload_too_large",
    `Cannot read request body: ${size}, the limit is ${maxBytes}`,
  );
}

async function cancelBody(request: Request): Promise<void> {
  // A body already locked or consumed cannot be cancelled; there is nothing left to free then.
  await request.body?.cancel().catch(() => {});
}

/** The whole body in one buffer, stopping once more than `maxBytes` arrived; each read races a timer. */
async function readLimited(
  request: Request,
  maxBytes: number,
  signals: AbortSignal[],
  idleTimeoutMs: number,
): Promise<Uint8Array> {
  const aborted = signals.find((signal) => signal.aborted);
  if (aborted !== undefined) {
    await cancelBody(request);
    throw abortError(aborted, "Cannot read request body: the request");
  }
  if (request.body === null) return new Uint8Array(0);
  // A buffer of at most the limit (plus the byte that tells it was passed), reused; each chunk is copied out.
  const reader = chunkReader(request.body, { bufferBytes: Math.min(maxBytes + 1, DEFAULT_CHUNK_BYTES) });
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    while (true) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const idle = new Promise<never>((_, reject) => {
        const message = `Cannot read request body: no data arrived for ${idleTimeoutMs} ms`;
        timer = setTimeout(() => reject(new HttpError(408, "request_timeout", message)), idleTimeoutMs);
      });
      const read = Promise.race([reader.read().catch(streamFailed), idle]);
      const { done, value } = await abortable(read, signals).finally(() => clearTimeout(timer));
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) throw tooLarge(`it is at least ${total} bytes`, maxBytes);
      chunks.push(value.slice());
    }
  } catch (error) {
    await reader.cancel().catch(() => {});
    throw error;
  } finally {
    reader.releaseLock();
  }
  if (chunks.length === 1) return chunks[0];
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}

function streamFailed(error: unknown): never {
  const why = (error as Error)?.message ?? String(error);
  const abort = new DOMException(`Cannot read request body: the stream failed (${why})`, "AbortError");
  Object.defineProperty(abort, "cause", { value: error, writable: true, configurable: true });
  throw abort;
}
