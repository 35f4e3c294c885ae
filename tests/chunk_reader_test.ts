import assert from "node:assert/strict";
import { chunkReader } from "../src/chunk_reader.ts";

/** Every chunk's text and the size of the buffer behind it. */
async function readAll(body: ReadableStream<Uint8Array>, bufferBytes?: number) {
  const reader = chunkReader(body, { bufferBytes });
  const chunks: { text: string; buffer: number }[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push({ text: new TextDecoder().decode(value), buffer: value.buffer.byteLength });
  }
  reader.releaseLock();
  return chunks;
}

Deno.test("chunkReader() reads a fetch response body into its one small buffer, not 64 KiB per read", async () => {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
    const parts = ["data: one\n\n", "data: two\n\n", "data: three\n\n"];
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const part = parts.shift();
        if (part === undefined) return controller.close();
        await new Promise((resolve) => setTimeout(resolve, 5));
        controller.enqueue(new TextEncoder().encode(part));
      },
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  });
  try {
    const response = await fetch(`http://127.0.0.1:${server.addr.port}/`);
    const chunks = await readAll(response.body!, 1024);
    assert.equal(chunks.map((c) => c.text).join(""), "data: one\n\ndata: two\n\ndata: three\n\n");
    assert.ok(chunks.every((c) => c.buffer === 1024), JSON.stringify(chunks));
  } finally {
    await server.shutdown();
  }
});

Deno.test("chunkReader() reuses its buffer for a byte stream that would allocate 64 KiB a read", async () => {
  let left = 5;
  const body = new ReadableStream({
    type: "bytes",
    autoAllocateChunkSize: 64 * 1024,
    pull(controller) {
      const view = controller.byobRequest!.view!;
      if (left-- === 0) {
        controller.close();
        controller.byobRequest!.respond(0);
        return;
      }
      new Uint8Array(view.buffer, view.byteOffset, 3).set([97, 98, 99]);
      controller.byobRequest!.respond(3);
    },
  });
  const chunks = await readAll(body, 16);
  assert.deepEqual(chunks.map((c) => c.text), ["abc", "abc", "abc", "abc", "abc"]);
  assert.ok(chunks.every((c) => c.buffer === 16));
});

Deno.test("chunkReader() reads any other stream with its default reader, chunks as made", async () => {
  const made = ReadableStream.from([new Uint8Array([104, 105])]);
  assert.deepEqual((await readAll(made)).map((c) => c.text), ["hi"]);
  assert.throws(() => chunkReader(new Response("x").body!, { bufferBytes: 0 }), RangeError);
});
