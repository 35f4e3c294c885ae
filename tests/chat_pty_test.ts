/**
 * The REPL on a real pseudo-terminal: `deno task chat` under `script` (util-linux), keystrokes written to it
 * as a person would type them, each after the text it answers has appeared.
 */
import assert from "node:assert/strict";
import { type FakeProvider, startFakeProvider } from "./fixtures/fake_openai.ts";
import { childEnv, ROOT, runProcess, tempDir } from "./_harness.ts";
import { freePort } from "../scripts/_bench_process.ts";

/** Why these tests cannot run here, or null: they need util-linux's `script` (other systems' differs). */
function noPseudoTerminal(): string | null {
  try {
    const { stdout } = new Deno.Command("script", { args: ["--version"], stdout: "piped", stderr: "null" })
      .outputSync();
    return new TextDecoder().decode(stdout).includes("util-linux") ? null : "script is not util-linux's";
  } catch {
    return "no script command (util-linux) to make a pseudo-terminal";
  }
}
const IGNORED = noPseudoTerminal();
if (IGNORED !== null) console.log(`terminal tests ignored: ${IGNORED}`);

/** A terminal test: a temp folder and a fake provider for `fn`, ignored (with the reason) without a PTY. */
function ttyTest(name: string, fn: (dir: { path: string }, provider: FakeProvider) => Promise<void>): void {
  Deno.test({ name, ignore: IGNORED !== null }, async () => {
    using dir = tempDir();
    const provider = startFakeProvider();
    try {
      await fn(dir, provider);
    } finally {
      await provider.close();
    }
  });
}

/** `deno task chat args` on a terminal of its own. */
function spawnTty(args: string[], env: Record<string, string>) {
  const child = new Deno.Command("script", {
    args: ["-qfec", ["deno", "task", "--quiet", "chat", ...args].join(" "), "/dev/null"],
    cwd: ROOT,
    env,
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  let output = "";
  const reading = (async () => {
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) output += chunk;
  })();
  const writer = child.stdin.getWriter();
  return {
    output: () => output,
    /** Waits (bounded) until `text` appears after position `from` of the output; returns where it ends. */
    async waitFor(text: string, from = 0): Promise<number> {
      for (let i = 0; i < 750 && output.indexOf(text, from) === -1; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const at = output.indexOf(text, from);
      assert.ok(
        at !== -1,
        `timed out waiting for ${JSON.stringify(text)} in ${JSON.stringify(output.slice(from))}`,
      );
      return at + text.length;
    },
    async type(keys: string): Promise<void> {
      await writer.write(new TextEncoder().encode(keys));
    },
    /** Resolves to the exit code once the program ended and its output is read; kills it after 15 s. */
    async exit(): Promise<number> {
      let killed = false;
      const timer = setTimeout(() => {
        killed = true;
        child.kill("SIGKILL");
      }, 15_000);
      const { code } = await child.status;
      clearTimeout(timer);
      await reading;
      await writer.close().catch(() => {});
      assert.ok(!killed, `the chat did not exit; it showed ${JSON.stringify(output.slice(-200))}`);
      return code;
    },
  };
}

function ttyEnv(dir: string, url: string, extra: Record<string, string> = {}): Record<string, string> {
  return childEnv(dir, { TERM: "xterm", OPENAI_BASE_URL: url, ...extra });
}

function userMessages(request: Record<string, unknown>): (string | null)[] {
  return (request.messages as { role: string; content: string | null }[])
    .filter((m) => m.role === "user").map((m) => m.content);
}

const PASTED = "first line\nsecond line\n\nlast line";

ttyTest(
  "on a terminal a bracketed paste is one turn: the model gets one message with its newlines",
  async (dir, provider) => {
    const tty = spawnTty([], ttyEnv(dir.path, provider.url));
    let at = await tty.waitFor("you> ");
    // A terminal sends pasted lines with \r, as if Enter were pressed on each; the brackets make it one entry.
    await tty.type(`\x1b[200~${PASTED.replaceAll("\n", "\r")}\x1b[201~`);
    at = await tty.waitFor("last line", at);
    await tty.type("\r");
    at = await tty.waitFor("echo: first line", at);
    await tty.waitFor("you> ", at);
    await tty.type("\x04");
    assert.equal(await tty.exit(), 0);
    assert.equal(provider.requests.length, 1, tty.output());
    assert.deepEqual(userMessages(provider.requests[0]), [PASTED]);
    assert.ok(tty.output().startsWith("\x1b[?2004h"), "bracketed paste is turned on first");
    assert.ok(tty.output().includes("\x1b[?2004l"), "and off again on exit");
  },
);

ttyTest(
  "on a terminal Ctrl-C clears the line, and a second Ctrl-C on the empty line exits 0 with a newline",
  async (dir, provider) => {
    const tty = spawnTty([], ttyEnv(dir.path, provider.url));
    let at = await tty.waitFor("you> ");
    await tty.type("half a thought");
    at = await tty.waitFor("half a thought", at);
    await tty.type("\x03");
    at = await tty.waitFor("^C", at);
    await tty.waitFor("you> ", at);
    await tty.type("\x03");
    assert.equal(await tty.exit(), 0);
    assert.equal(provider.requests.length, 0, "the cleared line was never sent");
    assert.ok(tty.output().endsWith("\n"), JSON.stringify(tty.output().slice(-40)));
  },
);

/** SGR sequences: colour, bold, dim. */
// deno-lint-ignore no-control-regex
const SGR = /\x1b\[[0-9;]*m/;

ttyTest(
  "on a terminal NO_COLOR and --no-color leave no colour codes; otherwise there are some",
  async (dir, provider) => {
    const cases: [string, string[], Record<string, string>, boolean][] = [
      ["plain terminal", [], {}, true],
      ["NO_COLOR=1", [], { NO_COLOR: "1" }, false],
      ["--no-color", ["--no-color"], {}, false],
    ];
    for (const [name, args, extra, coloured] of cases) {
      const tty = spawnTty(["--session", `c${cases.findIndex((c) => c[0] === name)}`, ...args], {
        ...ttyEnv(dir.path, provider.url),
        ...extra,
      });
      let at = await tty.waitFor("you> ");
      await tty.type("what is 12*(3+4)?\r");
      at = await tty.waitFor("The answer is 84.", at);
      await tty.waitFor("you> ", at);
      await tty.type("\x04");
      assert.equal(await tty.exit(), 0, name);
      assert.match(tty.output(), /calculator\(/, `${name}: the tool call is shown`);
      assert.equal(
        SGR.test(tty.output()),
        coloured,
        `${name}: ${JSON.stringify(tty.output().slice(0, 200))}`,
      );
    }
  },
);

ttyTest(
  "on a terminal the input history outlives the process (up arrow) in a file of mode 600",
  async (dir, provider) => {
    const env = ttyEnv(dir.path, provider.url);
    const first = spawnTty([], env);
    let at = await first.waitFor("you> ");
    await first.type("remember this line\r");
    at = await first.waitFor("echo: remember this line", at);
    await first.waitFor("you> ", at);
    await first.type("\x04");
    assert.equal(await first.exit(), 0);
    const file = `${dir.path}/db/chat_history`;
    assert.equal(Deno.statSync(file).mode! & 0o777, 0o600);
    assert.equal(Deno.readTextFileSync(file), '"remember this line"\n');

    const second = spawnTty([], env);
    at = await second.waitFor("you> ");
    await second.type("\x1b[A");
    at = await second.waitFor("remember this line", at);
    await second.type("\r");
    at = await second.waitFor("echo: remember this line", at);
    await second.waitFor("you> ", at);
    await second.type("\x04");
    assert.equal(await second.exit(), 0);
    assert.equal(provider.requests.length, 2);
    assert.deepEqual(userMessages(provider.requests[1]), ["remember this line", "remember this line"]);
  },
);

ttyTest(
  "on a dumb terminal (TERM=dumb) chat goes line by line: no prompt, no escape code at all",
  async (dir, provider) => {
    const tty = spawnTty([], { ...ttyEnv(dir.path, provider.url), TERM: "dumb" });
    await tty.type("what is 12*(3+4)?\r");
    await tty.waitFor("The answer is 84.");
    await tty.type("\x04");
    assert.equal(await tty.exit(), 0);
    assert.ok(!tty.output().includes("\x1b"), JSON.stringify(tty.output()));
    assert.ok(!tty.output().includes("you> "));
  },
);

ttyTest(
  "on a terminal a closed model port is said once at start-up, and a failed turn once, with /retry",
  async (dir, _provider) => {
    const port = freePort(); // nothing listens there
    const tty = spawnTty(["--session", "down"], ttyEnv(dir.path, `http://127.0.0.1:${port}/v1`));
    let at = await tty.waitFor("you> ");
    await tty.type("hi\r");
    at = await tty.waitFor("/retry sends it again", at);
    await tty.waitFor("you> ", at);
    await tty.type("\x04");
    assert.equal(await tty.exit(), 0);
    const output = tty.output();
    const refused = `cannot connect to http://127.0.0.1:${port}: connection refused`;
    const startup = `model not reachable: ${refused} (the chat starts anyway)`;
    assert.equal(output.split(startup).length, 2, `said once at start-up: ${JSON.stringify(output)}`);
    assert.ok(output.indexOf(startup) < output.indexOf("you> "), "before the first prompt");
    assert.equal(output.split(refused).length, 3, "once at start-up, once for the turn");
    assert.ok(!output.includes("POST /v1/sessions"), "no HTTP route suggested in the chat");
  },
);

ttyTest(
  "on a terminal a reachable model is not mentioned at start-up, nor is it with --demo",
  async (dir, provider) => {
    for (const args of [[], ["--demo"]]) {
      const tty = spawnTty(args, ttyEnv(dir.path, provider.url));
      const at = await tty.waitFor("you> ");
      await tty.type("\x04");
      assert.equal(await tty.exit(), 0);
      assert.ok(!tty.output().slice(0, at).includes("not reachable"), JSON.stringify(tty.output()));
      if (args.length > 0) assert.match(tty.output(), /demo model \(demo-rules\): offline rules, not an LLM/);
    }
  },
);

ttyTest(
  "on a terminal the REPL opens session default, and with -c the last one-shot's session",
  async (dir, provider) => {
    const env = ttyEnv(dir.path, provider.url);
    const plain = spawnTty([], env);
    await plain.waitFor("you> ");
    await plain.type("\x04");
    assert.equal(await plain.exit(), 0);
    assert.match(plain.output(), /session default \(user local\), 0 turns/);

    const oneShot = await runProcess("deno", ["task", "--quiet", "chat", "-v", "hello there"], {
      env,
      clearEnv: true,
    });
    assert.equal(oneShot.code, 0, oneShot.stderr);
    const session = /^session (chat-[0-9a-f]{8})/.exec(oneShot.stderr)?.[1];
    assert.ok(session, oneShot.stderr);
    const continued = spawnTty(["-c"], env);
    await continued.waitFor("you> ");
    await continued.type("\x04");
    assert.equal(await continued.exit(), 0);
    assert.ok(continued.output().includes(`session ${session} (user local), 1 turn`), continued.output());
  },
);
