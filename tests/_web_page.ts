/// <reference lib="dom" />
/**
 * The browser tests' page: a real `serve` with its task's permission flags, the fake provider, and a page of
 * a headless Chromium on it. `reason` says why browser tests are ignored (no Chromium installed).
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { taskPermissionFlags } from "../src/permissions.ts";
import { type Browser, type Page, puppeteer } from "./_dev_deps.ts";
import { type FakeProvider, type FakeProviderOptions, startFakeProvider } from "./fixtures/fake_openai.ts";
import { childEnv, ROOT, type ServeProcess, spawnServe, tempDir } from "./_harness.ts";

const CANDIDATES = [
  Deno.env.get("CHROMIUM_PATH") ?? "",
  "/usr/bin/chromium-headless-shell",
  "/usr/lib/chromium/chromium-headless-shell",
  "/usr/bin/chromium",
];
const browserPath = CANDIDATES.find((path) => path !== "" && existsSync(path)) ?? null;

/** Why the browser tests are ignored, or null when a Chromium is there (then they run). */
export const reason: string | null = browserPath === null
  ? "no headless Chromium found (apt-get install chromium-headless-shell, or set CHROMIUM_PATH)"
  : null;
if (reason !== null) console.log(`browser test ignored: ${reason}`);

/** Where screenshots go (git-ignored). */
export const ARTIFACTS: string = fileURLToPath(new URL("./artifacts/", import.meta.url));

/** What a test's body gets besides the page and its URL. */
export interface PageContext {
  serve: ServeProcess;
  provider: FakeProvider;
  /** Every dialog the page opened, as `type: message` (confirmations accepted, others dismissed). */
  dialogs: string[];
}

/** Options of {@linkcode withPage}. */
export interface WithPageOptions {
  /**
   * The approval policy (the config file's `approval` value). When set, the server runs in a temporary folder
   * holding `mcp.json`, its database and its trace, with the flags `deno task serve` derives, so it may read
   * that file; otherwise it runs as `deno task serve` in the repository.
   * @default {undefined}
   */
  policy?: unknown;
  /** More Chromium flags, such as `--host-resolver-rules`. @default {[]} */
  browserArgs?: string[];
  /** How the fake provider behind the server answers. @default {{}} */
  provider?: FakeProviderOptions;
  /** Console errors the test causes on purpose (a connection it cuts). @default {undefined} (none) */
  expectedConsole?: RegExp;
}

/** A served page: `serve` (its real permissions) on a port it picks, and a browser page on it. */
export async function withPage(
  env: Record<string, string>,
  fn: (page: Page, url: string, context: PageContext) => Promise<void>,
  options: WithPageOptions = {},
): Promise<void> {
  const { policy, browserArgs = [], expectedConsole } = options;
  using dir = tempDir();
  const provider = startFakeProvider(options.provider);
  // Port 0: the server takes a free port itself and prints it.
  const base = { AGENT_PORT: "0", OPENAI_BASE_URL: provider.url, NO_COLOR: "1", ...env };
  let serve: ServeProcess;
  if (policy === undefined) {
    serve = spawnServe(["task", "serve"], childEnv(dir.path, base));
  } else {
    Deno.writeTextFileSync(`${dir.path}/mcp.json`, JSON.stringify({ approval: policy }));
    const served = childEnv(dir.path, {
      AGENT_DB_PATH: `${dir.path}/sessions.db`,
      AGENT_TRACE_PATH: `${dir.path}/traces.jsonl`,
      ...base,
    });
    const flags = taskPermissionFlags(served, { task: "serve" });
    const args = ["run", "--no-prompt", "--config", `${ROOT}/deno.json`, ...flags, `${ROOT}/src/main.ts`];
    serve = spawnServe([...args, "serve"], served, { cwd: dir.path });
  }
  let browser: Browser | null = null;
  try {
    await serve.listening;
    assert.match(serve.stderr(), /listening on/, serve.stderr());
    browser = await puppeteer.launch({
      executablePath: browserPath!,
      headless: true,
      args: ["--no-sandbox", "--disable-gpu", "--no-first-run", ...browserArgs],
    });
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 860 });
    const dialogs: string[] = [];
    page.on("dialog", (dialog) => {
      dialogs.push(`${dialog.type()}: ${dialog.message()}`);
      (dialog.type() === "confirm" ? dialog.accept() : dialog.dismiss()).catch(() => {});
    });
    const problems: string[] = [];
    page.on("console", (message) => {
      // 401 and 409 are answers the page shows (the token form, a turn refused while one waits).
      const expected = /40[19]/.test(message.text()) || expectedConsole?.test(message.text()) === true;
      if (message.type() === "error" && !expected) problems.push(message.text());
    });
    page.on("pageerror", (error) => problems.push(String(error)));
    // Chromium's console line names no URL: the failed responses say which request it was.
    page.on("response", (response) => {
      const status = response.status();
      if (status >= 400 && !/40[19]/.test(String(status))) problems.push(`HTTP ${status} ${response.url()}`);
    });
    await fn(page, `http://127.0.0.1:${serve.port()}`, { serve, provider, dialogs });
    // A policy violation or a script error shows up here (Chromium logs both as console errors).
    assert.deepEqual(problems, []);
  } finally {
    await browser?.close();
    await serve.stop();
    await provider.close();
  }
}

/** The page's text of all elements matching `selector`. */
export function texts(page: Page, selector: string): Promise<string[]> {
  return page.$$eval(selector, (nodes) => nodes.map((node) => node.textContent ?? ""));
}
