/**
 * Reading a body a chunk at a time into one reused buffer. Deno's default reader of a byte stream (a fetch
 * response body, a request body that came after its headers) allocates 64 KiB outside the JS heap for every
 * read, however few bytes arrive; under load those piled up by tens of MB between collections.
 * @module
 */

/** The buffer a byte stream is read into when the caller names no size. */
export const DEFAULT_CHUNK_BYTES = 16 * 1024;

/** Options of {@linkcode chunkReader}. */
export interface ChunkReaderOptions {
  /** Size of the one buffer a byte stream is read into, at least 1. @default {DEFAULT_CHUNK_BYTES} */
  bufferBytes?: number;
}

/** A reader whose chunk is valid only until the next `read`: copy what must outlive it. */
export type ChunkReader = Pick<ReadableStreamDefaultReader<Uint8Array>, "read" | "cancel" | "releaseLock">;

/**
 * Locks `body` and reads it into one buffer of `bufferBytes`, reused for every read, when it is a byte stream;
 * any other stream is read with its default reader (chunks as it made them).
 * @throws {RangeError} when `bufferBytes` is not a positive integer.
 */
export function chunkReader(body: ReadableStream<Uint8Array>, options: ChunkReaderOptions = {}): ChunkReader {
  const { bufferBytes = DEFAULT_CHUNK_BYTES } = options;
  if (!Number.isInteger(bufferBytes) || bufferBytes < 1) {
    throw new RangeError(`Cannot read body: bufferBytes must be a positive integer, got ${bufferBytes}`);
  }
  let reader: ReadableStreamBYOBReader;
  try {
    reader = body.getReader({ mode: "byob" });
  } catch {
    return body.getReader(); // not a byte stream
  }
  let buffer = new Uint8Array(bufferBytes);
  return {
    async read() {
      const result = await reader.read(buffer);
      // The read took the buffer and hands it back in `value`, over what it filled.
      if (result.value !== undefined) buffer = new Uint8Array(result.value.buffer);
      return result.done ? { done: true, value: undefined } : result;
    },
    cancel: (reason) => reader.cancel(reason),
    releaseLock: () => reader.releaseLock(),
  };
}
