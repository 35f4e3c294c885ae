/**
 * Several processes opening one new SQLite file at the same moment (replicas, or chat beside serve) all get
 * a working store: "database is locked" while one of them switches the file to WAL or migrates it is waited
 * out, not reported.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { tempDir } from "./_harness.ts";

const STORE = fileURLToPath(new URL("../src/store/sqlite.ts", import.meta.url));

Deno.test("SqliteStore opens in 8 processes at once on one new file, in every round", async () => {
  using dir = tempDir();
  for (let round = 0; round < 3; round++) {
    const path = `${dir.path}/round-${round}.db`;
    // Each child loads the store first, then waits for one shared moment to open the file.
    const start = Date.now() + 1500;
    const script = `const { SqliteStore } = await import(${JSON.stringify(STORE)});
      while (Date.now() < ${start}) await new Promise((resolve) => setTimeout(resolve, 1));
      const store = new SqliteStore(${JSON.stringify(path)});
      await store.getOrCreate({ userId: "u", sessionId: "s" + Deno.pid });
      await store.close();`;
    const children = Array.from({ length: 8 }, () =>
      new Deno.Command(Deno.execPath(), {
        args: ["eval", "--quiet", script],
        stdout: "null",
        stderr: "piped",
      }).output());
    const results = await Promise.all(children);
    const failures = results.filter((r) => !r.success).map((r) => new TextDecoder().decode(r.stderr));
    assert.deepEqual(failures, [], `round ${round}`);
  }
});
