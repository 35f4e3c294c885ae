/** The line editor and its key decoder on in-memory streams: a fake terminal that accepts `setRawMode`. */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { LineEditor, PASTE_OFF, PASTE_ON, type ReadResult } from "../src/cli/editor.ts";
import { MemoryHistory } from "../src/cli/history.ts";
import { KeyDecoder } from "../src/cli/keys.ts";
import { FakeClock, settle } from "./_fake_clock.ts";

/**
 * A terminal in memory: type into it, read what was drawn, see the raw-mode switches. The editor's Esc delay
 * passes on `clock` alone, so keys typed in chunks are never taken apart by a slow machine.
 */
function fakeTty(
  options: { history?: string[]; complete?: (line: string) => string[]; escapeDelay?: number } = {},
) {
  const input = Object.assign(new PassThrough(), {
    raw: [] as boolean[],
    setRawMode(raw: boolean) {
      this.raw.push(raw);
    },
  });
  const output = new PassThrough();
  let drawn = "";
  output.on("data", (chunk: Uint8Array) => (drawn += new TextDecoder().decode(chunk)));
  const history = new MemoryHistory(options.history ?? []);
  const clock = new FakeClock();
  const editor = new LineEditor(input, output, {
    history,
    clock,
    ...(options.complete ? { complete: options.complete } : {}),
    ...(options.escapeDelay !== undefined ? { escapeDelay: options.escapeDelay } : {}),
  });
  editor.start();
  return {
    editor,
    input,
    history,
    clock,
    drawn: () => drawn,
    /** Types `keys` (each string one chunk) and resolves with the entry they complete. */
    async enter(...keys: string[]): Promise<ReadResult> {
      const entry = editor.read();
      for (const chunk of keys) input.write(chunk);
      return await bounded(entry);
    },
  };
}

/** Settles until `condition` holds, 100 rounds at most: the input's chunks arrive on later ticks. */
async function settledUntil(condition: () => boolean): Promise<void> {
  for (let round = 0; round < 100 && !condition(); round++) await settle();
}

function bounded<T>(promise: Promise<T>): Promise<T> {
  let timer!: ReturnType<typeof setTimeout>;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("the editor never resolved the entry")), 2000);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

Deno.test("LineEditor turns on raw mode and bracketed paste at start, and turns both off at close", () => {
  const tty = fakeTty();
  tty.editor.close();
  assert.deepEqual(tty.input.raw, [true, false]);
  assert.ok(tty.drawn().startsWith(PASTE_ON));
  assert.ok(tty.drawn().endsWith(PASTE_OFF));
});

Deno.test("LineEditor makes a bracketed paste one entry, even when it arrives in pieces", async () => {
  const tty = fakeTty();
  const entry = await tty.enter("\x1b[20", "0~one\rtwo\r\nthree\x1b[2", "01~", "\r");
  assert.deepEqual(entry, { kind: "line", text: "one\ntwo\nthree" });
  assert.ok(tty.drawn().includes("...> two"), "further lines get the continuation prompt");
  tty.editor.close();
});

Deno.test("LineEditor inserts a newline for Alt+Enter and Ctrl+J, and sends on Enter", async () => {
  const tty = fakeTty();
  assert.deepEqual(await tty.enter("one\x1b\rtwo\nthree\r"), { kind: "line", text: "one\ntwo\nthree" });
  tty.editor.close();
});

Deno.test('LineEditor treats the lines between two """ lines as one entry', async () => {
  const tty = fakeTty();
  assert.deepEqual(await tty.enter('"""\r', "first\r", "  second\r", '"""\r'), {
    kind: "line",
    text: "first\n  second",
  });
  tty.editor.close();
});

Deno.test("LineEditor edits with left, right, home, end, backspace, delete and Ctrl-U", async () => {
  const tty = fakeTty();
  assert.deepEqual(await tty.enter("helo\x1b[Dl\x1b[H>\x1b[F!\r"), { kind: "line", text: ">hello!" });
  assert.deepEqual(await tty.enter("abcd\x7f\x01\x1b[3~\x1b[C\x1b[C!\r"), { kind: "line", text: "bc!" });
  assert.deepEqual(await tty.enter("gone\x15kept\r"), { kind: "line", text: "kept" });
  tty.editor.close();
});

Deno.test("LineEditor recalls history with up and down and gives back the draft", async () => {
  const tty = fakeTty({ history: ["first", "second"] });
  assert.deepEqual(await tty.enter("dra", "\x1b[A", "\x1b[A", "\x1b[A", "\x1b[B", "\x1b[B", "ft\r"), {
    kind: "line",
    text: "draft",
  });
  assert.deepEqual(await tty.enter("\x1b[A\x1b[A\x1b[A\r"), { kind: "line", text: "first" });
  assert.deepEqual(tty.history.entries, ["first", "second", "draft", "first"]);
  tty.editor.close();
});

Deno.test("LineEditor completes a unique command on Tab and lists the choices when there are several", async () => {
  const commands = ["/help", "/session", "/sessions", "/switch "];
  const tty = fakeTty({ complete: (line) => commands.filter((c) => c.startsWith(line)) });
  assert.deepEqual(await tty.enter("/he\t\r"), { kind: "line", text: "/help" });
  assert.deepEqual(await tty.enter("/s\t", "w\t", "dev\r"), { kind: "line", text: "/switch dev" });
  assert.match(tty.drawn(), /\/session {2}\/sessions {2}\/switch/);
  tty.editor.close();
});

Deno.test("LineEditor: Ctrl-C clears the line, a second on the empty line exits; Ctrl-D on an empty line exits", async () => {
  const tty = fakeTty();
  assert.deepEqual(await tty.enter("draft\x03", "\x03"), { kind: "exit" });
  // deno-lint-ignore no-control-regex
  assert.match(tty.drawn(), /draft(\r\x1b\[\d+C)?\^C/);
  assert.deepEqual(
    await tty.enter("\x03", "typed\r"),
    { kind: "line", text: "typed" },
    "one Ctrl-C only warns",
  );
  assert.deepEqual(await tty.enter("ab\x01\x04\r"), { kind: "line", text: "b" }, "Ctrl-D deletes on a line");
  assert.deepEqual(await tty.enter("\x04"), { kind: "exit" });
  tty.editor.close();
  assert.ok(tty.drawn().endsWith("\r\n"), "the terminal is left on a new line");
});

Deno.test("LineEditor hands Ctrl-C to onInterrupt while no entry is read, and keeps keys typed ahead", async () => {
  const tty = fakeTty();
  let interrupts = 0;
  tty.editor.onInterrupt(() => interrupts++);
  tty.input.write("\x03typed ahead\r");
  await settledUntil(() => interrupts > 0);
  assert.equal(interrupts, 1);
  assert.deepEqual(await tty.enter(), { kind: "line", text: "typed ahead" });
  tty.editor.close();
});

Deno.test("LineEditor ends with exit when its input ends", async () => {
  const tty = fakeTty();
  const entry = tty.editor.read();
  tty.input.end("half");
  assert.deepEqual(await bounded(entry), { kind: "exit" });
  tty.editor.close();
});

Deno.test("KeyDecoder completes an escape sequence split across chunks and ignores unbound ones", () => {
  const decoder = new KeyDecoder();
  assert.deepEqual(decoder.push("a\x1b"), [{ name: "text", text: "a" }]);
  assert.deepEqual(decoder.push("[A\x1b[1;5C\x1b[5~\x1bOF"), [{ name: "up" }, { name: "right" }, {
    name: "end",
  }]);
  assert.deepEqual(decoder.push("\x0c\x07é"), [{ name: "clear" }, { name: "text", text: "é" }]);
});

Deno.test("LineEditor moves and deletes over an emoji whole, never splitting its surrogate pair", async () => {
  const tty = fakeTty();
  assert.deepEqual(await tty.enter("a😀b\x1b[D\x7f\r"), { kind: "line", text: "ab" }, "Backspace");
  assert.deepEqual(await tty.enter("😀x\x01\x1b[3~\r"), { kind: "line", text: "x" }, "Delete");
  assert.deepEqual(await tty.enter("😀\x01\x1b[Cz\r"), { kind: "line", text: "😀z" }, "Right");
  assert.deepEqual(await tty.enter("e\u0301\x7f\r"), { kind: "line", text: "" }, "a letter and its accent");
  tty.editor.close();
});

Deno.test("LineEditor draws pasted control characters as stand-ins and submits them unchanged", async () => {
  const tty = fakeTty();
  const pasted = "red\x1b[31m\x1b]52;c;aGk=\x07\tx\x9b2J";
  assert.deepEqual(await tty.enter(`\x1b[200~${pasted}\x1b[201~`, "\r"), { kind: "line", text: pasted });
  const drawn = tty.drawn();
  for (const raw of ["\x1b[31m", "\x1b]52", "\x07", "\t", "\x9b"]) {
    assert.ok(!drawn.includes(raw), `drew ${JSON.stringify(raw)} raw`);
  }
  assert.ok(drawn.includes("red^[[31m^[]52;c;aGk=^G x\uFFFD2J"), JSON.stringify(drawn));
  tty.editor.close();
});

Deno.test("LineEditor takes Esc, Esc then an arrow, as Escape (ignored) and the arrow", async () => {
  const tty = fakeTty();
  assert.deepEqual(await tty.enter("one\x1b", "\x1b[Dx\r"), { kind: "line", text: "onxe" });
  assert.deepEqual(await tty.enter("one\x1b\x1b[Dx\r"), { kind: "line", text: "onxe" });
  tty.editor.close();
});

Deno.test("LineEditor ends a lone Esc after its delay, so the next key is typed, not Alt+key", async () => {
  const tty = fakeTty({ escapeDelay: 5 });
  const entry = tty.editor.read();
  tty.input.write("a\x1b");
  await settledUntil(() => tty.clock.pending === 1);
  assert.equal(tty.clock.pending, 1, "the lone Esc waits for the rest of a sequence");
  await tty.clock.advance(5);
  tty.input.write("b\r");
  assert.deepEqual(await bounded(entry), { kind: "line", text: "ab" });
  tty.input.write("\x1b");
  await settledUntil(() => tty.clock.pending === 1);
  tty.editor.close();
  assert.equal(tty.clock.pending, 0, "the Esc's wait does not outlive the editor");
});
