import assert from "node:assert/strict";

const TASKS: Record<string, string | { command: string }> =
  JSON.parse(Deno.readTextFileSync(new URL("../deno.json", import.meta.url))).tasks;

function command(name: string): string {
  const task = TASKS[name];
  return typeof task === "string" ? task : task.command;
}

Deno.test("deno task test leaves out exactly the files deno task test:slow runs, with the same flags", () => {
  const fast = command("test");
  const slow = command("test:slow");
  const ignored = fast.match(/'--ignore=([^']+)'/)?.[1].split(",") ?? [];
  const slowFiles = slow.split(" ").filter((word) => word.startsWith("tests/"));
  assert.ok(slowFiles.length > 0);
  assert.deepEqual(ignored, slowFiles);
  const flags = (text: string) =>
    text.split(" ").filter((word) => /^--(lock|no-prompt|sanitize|allow)/.test(word));
  assert.deepEqual(flags(fast), flags(slow));
  assert.deepEqual(flags(command("test:random")), flags(fast));
});
