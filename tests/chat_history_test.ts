/** The REPL's input history file: shared by REPLs running at once, bounded, private. */
import assert from "node:assert/strict";
import { FileHistory } from "../src/cli/history.ts";
import { tempDir } from "./_harness.ts";

Deno.test("FileHistory: two REPLs writing at once keep each other's entries", () => {
  using dir = tempDir();
  const path = `${dir.path}/h/chat_history`;
  const a = new FileHistory(path);
  const b = new FileHistory(path);
  a.add("typed in terminal A");
  b.add("typed in terminal B");
  a.add("second in A\nwith two lines");
  assert.deepEqual(new FileHistory(path).entries, [
    "typed in terminal A",
    "typed in terminal B",
    "second in A\nwith two lines",
  ]);
  assert.equal(Deno.statSync(path).mode! & 0o777, 0o600);
});

Deno.test("FileHistory keeps the last entries only, cutting the file back through a rename, still mode 600", () => {
  using dir = tempDir();
  const path = `${dir.path}/chat_history`;
  const history = new FileHistory(path, { max: 10 });
  for (let i = 1; i <= 13; i++) history.add(`entry ${i}`);
  // 13 lines pass 10 + a fifth: the file was cut back to the last 10 when the 13th came.
  const lines = Deno.readTextFileSync(path).trimEnd().split("\n");
  assert.equal(lines.length, 10);
  assert.equal(JSON.parse(lines[0]), "entry 4");
  assert.deepEqual(new FileHistory(path, { max: 10 }).entries.at(-1), "entry 13");
  assert.equal(Deno.statSync(path).mode! & 0o777, 0o600);
  assert.deepEqual([...Deno.readDirSync(dir.path)].map((e) => e.name), ["chat_history"], "no temporary left");
});

Deno.test("FileHistory leaves out entries typed with a leading space, and repeats of the last one", () => {
  using dir = tempDir();
  const path = `${dir.path}/chat_history`;
  const history = new FileHistory(path);
  history.add("kept");
  history.add("kept");
  history.add(" secret-ish");
  assert.deepEqual(history.entries, ["kept", " secret-ish"], "in memory for this run");
  assert.deepEqual(new FileHistory(path).entries, ["kept"]);
});
