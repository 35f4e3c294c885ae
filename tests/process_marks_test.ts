/**
 * ProcessMarks: a process's mark reads as gone once the process is killed (the kernel drops its lock), never
 * while it runs, never when there is no mark; old marks of gone processes are swept, live ones never.
 */
import assert from "node:assert/strict";
import { ProcessMarks } from "../src/session/process_marks.ts";
import { tempDir } from "./_harness.ts";

/** A child process that marks itself as `owner` in `folder`, then waits to be killed. */
async function markingChild(folder: string, owner: string): Promise<Deno.ChildProcess> {
  const url = new URL("../src/session/process_marks.ts", import.meta.url).href;
  const code = `import { ProcessMarks } from ${JSON.stringify(url)};
    console.log(new ProcessMarks(${JSON.stringify(folder)}).mark(${JSON.stringify(owner)}));
    setInterval(() => {}, 60_000);`;
  const child = new Deno.Command("deno", {
    args: ["eval", "--no-prompt", `--allow-read=${folder}`, `--allow-write=${folder}`, code],
    env: { DENO_DIR: Deno.env.get("DENO_DIR") ?? "" },
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const { value } = await reader.read();
  await reader.cancel();
  assert.equal(value?.trim(), "true", "the child marked itself");
  return child;
}

Deno.test("ProcessMarks.isGone() is false while the marking process runs and true once it is killed", async () => {
  using dir = tempDir();
  const marks = new ProcessMarks(dir.path);
  const child = await markingChild(dir.path, "box:42:1700000000000:aaaaaaaa");
  try {
    assert.equal(marks.isGone("box:42:1700000000000:aaaaaaaa"), false, "it runs");
    assert.equal(marks.isGone("box:42:1700000000000:aaaaaaaa"), false, "asking took no lock it kept");
  } finally {
    child.kill("SIGKILL");
    await child.status;
  }
  assert.equal(marks.isGone("box:42:1700000000000:aaaaaaaa"), true, "killed: its lock is gone");
  assert.equal(marks.isGone("box:43:1700000000000:bbbbbbbb"), false, "no mark: cannot tell");
});

Deno.test("ProcessMarks.mark() makes this process's own mark read as running, and close() removes it", () => {
  using dir = tempDir();
  const marks = new ProcessMarks(dir.path);
  try {
    assert.equal(marks.mark("box:1:1700000000000:aaaaaaaa"), true);
    assert.equal(marks.mark("box:1:1700000000000:aaaaaaaa"), false, "one mark a process");
    assert.equal(marks.isGone("box:1:1700000000000:aaaaaaaa"), false);
    assert.equal(new ProcessMarks(dir.path).isGone("box:1:1700000000000:aaaaaaaa"), false, "from anywhere");
  } finally {
    marks.close();
  }
  assert.deepEqual([...Deno.readDirSync(`${dir.path}/.lease-owners`)], [], "closed: no mark left");
  assert.equal(marks.isGone("box:1:1700000000000:aaaaaaaa"), false, "no mark: cannot tell");
});

Deno.test("ProcessMarks.mark() sweeps marks of gone processes untouched for a day, and keeps the rest", () => {
  using dir = tempDir();
  const clock = { ms: Date.now() };
  const live = new ProcessMarks(dir.path, { now: () => clock.ms });
  const old = new Date(clock.ms - 25 * 3_600_000);
  try {
    assert.equal(live.mark("box:1:1:aaaaaaaa"), true);
    Deno.utimeSync(`${dir.path}/.lease-owners/box_1_1_aaaaaaaa.lock`, old, old); // live, but old
    for (const name of ["box_2_2_bbbbbbbb.lock", "box_3_3_cccccccc.lock"]) {
      Deno.writeTextFileSync(`${dir.path}/.lease-owners/${name}`, ""); // gone: nobody locks them
    }
    Deno.utimeSync(`${dir.path}/.lease-owners/box_2_2_bbbbbbbb.lock`, old, old);
    const next = new ProcessMarks(dir.path, { now: () => clock.ms });
    try {
      assert.equal(next.mark("box:4:4:dddddddd"), true);
      const left = [...Deno.readDirSync(`${dir.path}/.lease-owners`)].map((e) => e.name).sort();
      assert.deepEqual(left, ["box_1_1_aaaaaaaa.lock", "box_3_3_cccccccc.lock", "box_4_4_dddddddd.lock"]);
      assert.equal(next.isGone("box:3:3:cccccccc"), true, "gone lately: still told");
    } finally {
      next.close();
    }
  } finally {
    live.close();
  }
});

Deno.test("ProcessMarks.mark() answers false where the folder cannot be made, and rejects bad durations", () => {
  using dir = tempDir();
  Deno.writeTextFileSync(`${dir.path}/file`, "");
  const marks = new ProcessMarks(`${dir.path}/file`);
  assert.equal(marks.mark("box:1:1:aaaaaaaa"), false);
  assert.equal(marks.isGone("box:1:1:aaaaaaaa"), false);
  marks.close();
  assert.throws(() => new ProcessMarks(dir.path, { keepGoneMs: 0 }), RangeError);
  assert.throws(() => new ProcessMarks(dir.path, { touchEveryMs: Number.NaN }), RangeError);
});
