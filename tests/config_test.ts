import assert from "node:assert/strict";
import { isLoopbackUrl, loadConfig, requireApiKey, SETTINGS } from "../src/config.ts";
import { llmNetHost } from "../src/permissions.ts";
import { ConfigError } from "../src/errors.ts";

Deno.test("loadConfig() gives every documented default for an empty environment", () => {
  const config = loadConfig({});
  assert.deepEqual({ ...config }, {
    apiKey: "",
    baseUrl: "https://api.openai.com/v1",
    model: "gpt-4o-mini",
    api: "chat",
    anthropicApiKey: "",
    anthropicBaseUrl: "https://api.anthropic.com",
    thinkingBudget: null,
    maxOutputTokens: null,
    llmTimeoutSeconds: 60,
    llmRetries: 2,
    llmRetryBaseDelay: 0.5,
    maxToolIters: 8,
    maxRawTurns: 20,
    compactBatch: 10,
    maxCtxTokens: 6000,
    dbPath: "data/sessions.db",
    databaseUrl: "",
    tracePath: "data/traces.jsonl",
    historyPath: "data/chat_history",
    traceMaxPayloadChars: 2000,
    runLiveTests: false,
    serveMcp: false,
    host: "127.0.0.1",
    port: 8787,
    apiTokens: [],
    allowedHosts: [],
    maxBodyBytes: 65536,
    shutdownGraceSeconds: 10,
    stream: true,
    showThinking: false,
    llmMaxReplyBytes: 1048576,
    maxToolCallsPerStep: 16,
    mcpConfig: "mcp.json",
    mcpTimeoutSeconds: 10,
    mcpStartTimeoutSeconds: 60,
    sessionLeaseSeconds: 30,
    traceMaxBytes: 67108864,
    traceTableMaxEvents: 1000000,
    traceRetentionDays: 30,
    sessionRetentionDays: null,
    responseFormatMode: "native",
    reasoningEffort: null,
    maxTurnTokens: null,
    turnTimeoutSeconds: null,
    userDailyTokens: null,
    userMemory: true,
    userMemoryItems: 200,
    userMemoryRecall: 5,
    prices: new Map(),
    tokenizer: "",
  });
  assert.ok(Object.isFrozen(config));
});

Deno.test("loadConfig() reads the turn's budget (whole tokens) and deadline (seconds, fractions allowed), both unset by default", () => {
  const config = loadConfig({ AGENT_MAX_TURN_TOKENS: " 20000 ", AGENT_TURN_TIMEOUT_SECONDS: "1.5" });
  assert.equal(config.maxTurnTokens, 20000);
  assert.equal(config.turnTimeoutSeconds, 1.5);
  for (
    const [name, value, expected] of [
      ["AGENT_MAX_TURN_TOKENS", "0", "a whole number of 1 or more, or unset"],
      ["AGENT_MAX_TURN_TOKENS", "10.5", "a whole number of 1 or more, or unset"],
      ["AGENT_MAX_TURN_TOKENS", "lots", "a whole number of 1 or more, or unset"],
      ["AGENT_TURN_TIMEOUT_SECONDS", "0", "a number greater than 0, or unset"],
      ["AGENT_TURN_TIMEOUT_SECONDS", "-5", "a number greater than 0, or unset"],
    ]
  ) {
    assert.throws(() => loadConfig({ [name]: value }), {
      name: "ConfigError",
      message: `Invalid ${name}="${value}": expected ${expected}`,
    });
  }
});

Deno.test("loadConfig() reads AGENT_REASONING_EFFORT as low, medium or high, unset by default, naming the values for a bad one", () => {
  for (const [raw, expected] of [["low", "low"], [" Medium ", "medium"], ["HIGH", "high"]]) {
    assert.equal(loadConfig({ AGENT_REASONING_EFFORT: raw }).reasoningEffort, expected, raw);
  }
  assert.equal(loadConfig({ AGENT_REASONING_EFFORT: "" }).reasoningEffort, null);
  assert.equal(loadConfig({ AGENT_REASONING_EFFORT: " " }).reasoningEffort, null);
  assert.equal(loadConfig({}).reasoningEffort, null);
  for (const bad of ["max", "minimal", "none", "1", "high,low"]) {
    assert.throws(
      () => loadConfig({ AGENT_REASONING_EFFORT: bad }),
      (e) =>
        e instanceof ConfigError && e.variable === "AGENT_REASONING_EFFORT" &&
        e.message === `Invalid AGENT_REASONING_EFFORT="${bad}": expected low, medium or high, or unset`,
      bad,
    );
  }
});

Deno.test("loadConfig() reads AGENT_PRICES as a table of dollars per million tokens, cached and cache-write ones optional, naming a bad entry", () => {
  const config = loadConfig({ AGENT_PRICES: "gpt-4o-mini=0.15/0.6, deepseek-chat = 0.27/1.10" });
  assert.deepEqual([...config.prices], [
    ["gpt-4o-mini", { input: 0.15, output: 0.6 }],
    ["deepseek-chat", { input: 0.27, output: 1.1 }],
  ]);
  assert.deepEqual([...loadConfig({ AGENT_PRICES: "gpt-4o-mini=0.15/0.6/0.075" }).prices], [
    ["gpt-4o-mini", { input: 0.15, output: 0.6, cached: 0.075 }],
  ]);
  assert.deepEqual([...loadConfig({ AGENT_PRICES: "claude-sonnet-4-5=3/15/0.30/3.75" }).prices], [
    ["claude-sonnet-4-5", { input: 3, output: 15, cached: 0.3, write: 3.75 }],
  ]);
  assert.throws(() => loadConfig({ AGENT_PRICES: "gpt-4o-mini=0.15/0.6/cheap" }), {
    name: "ConfigError",
    message:
      /^Invalid AGENT_PRICES="gpt-4o-mini=0.15\/0.6\/cheap": .*entry 1 \("gpt-4o-mini=0.15\/0.6\/cheap"\)/,
  });
  assert.throws(() => loadConfig({ AGENT_PRICES: "gpt-4o-mini=0.15" }), {
    name: "ConfigError",
    message: 'Invalid AGENT_PRICES="gpt-4o-mini=0.15": expected comma-separated model=in/out, ' +
      "model=in/out/cached or model=in/out/cached/write, dollars per million tokens: entry 1 " +
      '("gpt-4o-mini=0.15") is not model=in/out, model=in/out/cached or model=in/out/cached/write, dollars ' +
      "per million tokens",
  });
});

Deno.test("loadConfig() derives AGENT_COMPACT_BATCH from AGENT_MAX_RAW_TURNS unless it is set, 0 included", () => {
  assert.equal(loadConfig({ AGENT_MAX_RAW_TURNS: "7" }).compactBatch, 3);
  assert.equal(loadConfig({ AGENT_MAX_RAW_TURNS: "1" }).compactBatch, 1);
  assert.equal(loadConfig({ AGENT_MAX_RAW_TURNS: "7", AGENT_COMPACT_BATCH: "0" }).compactBatch, 0);
  assert.equal(loadConfig({ AGENT_COMPACT_BATCH: "25" }).compactBatch, 25);
  assert.throws(
    () => loadConfig({ AGENT_COMPACT_BATCH: "-1" }),
    /AGENT_COMPACT_BATCH="-1": expected a whole number/,
  );
});

Deno.test("loadConfig() reads the retention days: fractions allowed, AGENT_SESSION_RETENTION_DAYS unset or blank keeps sessions", () => {
  const config = loadConfig({ AGENT_TRACE_RETENTION_DAYS: "7", AGENT_SESSION_RETENTION_DAYS: " 0.5 " });
  assert.equal(config.traceRetentionDays, 7);
  assert.equal(config.sessionRetentionDays, 0.5);
  assert.equal(loadConfig({ AGENT_SESSION_RETENTION_DAYS: "" }).sessionRetentionDays, null);
  assert.equal(loadConfig({ AGENT_SESSION_RETENTION_DAYS: "  " }).sessionRetentionDays, null);
  assert.equal(loadConfig({ AGENT_TRACE_RETENTION_DAYS: "" }).traceRetentionDays, 30);
  const cases: [string, string, RegExp][] = [
    [
      "AGENT_TRACE_RETENTION_DAYS",
      "0",
      /^Invalid AGENT_TRACE_RETENTION_DAYS="0": expected a number greater than 0$/,
    ],
    ["AGENT_TRACE_RETENTION_DAYS", "-3", /expected a number greater than 0$/],
    ["AGENT_TRACE_RETENTION_DAYS", "a month", /expected a number greater than 0$/],
    [
      "AGENT_SESSION_RETENTION_DAYS",
      "0",
      /^Invalid AGENT_SESSION_RETENTION_DAYS="0": expected a number greater than 0, or unset$/,
    ],
    ["AGENT_SESSION_RETENTION_DAYS", "forever", /expected a number greater than 0, or unset$/],
    ["AGENT_SESSION_RETENTION_DAYS", "1e400", /expected a number greater than 0, or unset$/],
  ];
  for (const [name, value, pattern] of cases) {
    assert.throws(
      () => loadConfig({ [name]: value }),
      (e) => e instanceof ConfigError && e.variable === name && pattern.test(e.message),
      `${name}=${value}`,
    );
  }
});

Deno.test("loadConfig() reads every variable", () => {
  const config = loadConfig({
    OPENAI_API_KEY: "k",
    OPENAI_BASE_URL: "http://127.0.0.1:8080/v1/",
    MODEL: "deepseek-chat",
    LLM_TIMEOUT_SECONDS: "2.5",
    LLM_RETRIES: "0",
    LLM_RETRY_BASE_DELAY: "0",
    AGENT_MAX_TOOL_ITERS: "3",
    AGENT_MAX_RAW_TURNS: "4",
    AGENT_MAX_CTX_TOKENS: "1000",
    AGENT_DB_PATH: "/tmp/x.db",
    AGENT_TRACE_PATH: "/tmp/t.jsonl",
    AGENT_TRACE_MAX_PAYLOAD_CHARS: "10",
    RUN_LIVE_TESTS: "1",
    AGENT_RESPONSE_FORMAT: "Prompt",
    AGENT_TOKENIZER: "cl100k_base",
  });
  assert.equal(config.tokenizer, "cl100k_base");
  assert.equal(config.baseUrl, "http://127.0.0.1:8080/v1", "trailing slash dropped");
  assert.equal(config.responseFormatMode, "prompt");
  assert.equal(config.llmTimeoutSeconds, 2.5);
  assert.equal(config.llmRetries, 0);
  assert.equal(config.maxToolIters, 3);
  assert.equal(config.runLiveTests, true);
});

Deno.test("loadConfig() names the variable, the value and what is expected for a bad value", () => {
  const cases: [string, string, RegExp][] = [
    ["LLM_TIMEOUT_SECONDS", "soon", /^Invalid LLM_TIMEOUT_SECONDS="soon": expected a number greater than 0$/],
    ["LLM_TIMEOUT_SECONDS", "0", /expected a number greater than 0/],
    ["LLM_RETRIES", "-1", /^Invalid LLM_RETRIES="-1": expected a whole number of 0 or more$/],
    ["LLM_RETRIES", "1.5", /expected a whole number of 0 or more/],
    ["LLM_RETRY_BASE_DELAY", "-0.5", /expected a number of 0 or more/],
    ["AGENT_MAX_TOOL_ITERS", "0", /^Invalid AGENT_MAX_TOOL_ITERS="0": expected a whole number of 1 or more$/],
    ["AGENT_MAX_CTX_TOKENS", "1e400", /expected a whole number of 1 or more/],
    [
      "OPENAI_BASE_URL",
      "ftp://example.com",
      /^Invalid OPENAI_BASE_URL="ftp:\/\/example.com": expected an http/,
    ],
    ["OPENAI_BASE_URL", "not a url", /expected an http:\/\/ or https:\/\/ URL/],
    ["RUN_LIVE_TESTS", "yes", /expected 1, 0, true, false or unset/],
    ["AGENT_RESPONSE_FORMAT", "json", /^Invalid AGENT_RESPONSE_FORMAT="json": expected native or prompt$/],
    [
      "AGENT_TOKENIZER",
      "gpt2",
      /^Invalid AGENT_TOKENIZER="gpt2": expected o200k_base or cl100k_base, or unset$/,
    ],
  ];
  for (const [name, value, pattern] of cases) {
    assert.throws(
      () => loadConfig({ [name]: value }),
      (e) => e instanceof ConfigError && e.variable === name && pattern.test(e.message),
      `${name}=${value}`,
    );
  }
});

Deno.test("loadConfig() parses AGENT_API_TOKENS into token:user pairs and never echoes a malformed value", () => {
  assert.deepEqual(
    loadConfig({ AGENT_API_TOKENS: "s3cr:et-0123456789:alice, t2-0123456789abcd:bob" }).apiTokens,
    [
      { token: "s3cr:et-0123456789", userId: "alice" },
      { token: "t2-0123456789abcd", userId: "bob" },
    ],
  );
  for (const bad of ["justatoken", ":alice", "tok:bad user", "a:x,a:y"]) {
    assert.throws(
      () => loadConfig({ AGENT_API_TOKENS: bad }),
      (e) => e instanceof ConfigError && e.message.includes("(value hidden)") && !e.message.includes(bad),
      bad,
    );
  }
  assert.throws(() => loadConfig({ AGENT_PORT: "65536" }), /expected a port number from 0 to 65535/);
  assert.throws(() => loadConfig({ AGENT_HOST: "a b" }), /AGENT_HOST/);
  assert.throws(() => loadConfig({ AGENT_MAX_BODY_BYTES: "0" }), /AGENT_MAX_BODY_BYTES/);
});

Deno.test("loadConfig() reads AGENT_DATABASE_URL and never echoes a malformed one or its password", () => {
  const url = "postgres://agent:pw-SENTINEL@db.internal:6432/agent";
  assert.equal(loadConfig({ AGENT_DATABASE_URL: ` ${url} ` }).databaseUrl, url);
  assert.equal(loadConfig({}).databaseUrl, "");
  const cases: [string, RegExp][] = [
    ["mysql://u:pw-SENTINEL@h/db", /got a mysql: URL/],
    ["postgres://:pw-SENTINEL@h/db", /the user and host are required/],
    ["pw-SENTINEL", /not a URL/],
  ];
  for (const [bad, pattern] of cases) {
    assert.throws(
      () => loadConfig({ AGENT_DATABASE_URL: bad }),
      (e) =>
        e instanceof ConfigError && e.variable === "AGENT_DATABASE_URL" && pattern.test(e.message) &&
        e.message.includes("(value hidden)") && !e.message.includes("SENTINEL"),
      bad,
    );
  }
});

Deno.test("loadConfig() rejects a token under 16 characters and names a duplicate by position and user", () => {
  const short = "tok-short-15chr";
  assert.throws(
    () => loadConfig({ AGENT_API_TOKENS: `${"a".repeat(16)}:alice,${short}:bob` }),
    (e) =>
      e instanceof ConfigError && !e.message.includes(short) &&
      /the token of pair 2 \(user bob\) is 15 characters, at least 16 are needed/.test(e.message),
  );
  const token = "same-token-0123456789";
  assert.throws(
    () => loadConfig({ AGENT_API_TOKENS: `${token}:alice,${"b".repeat(16)}:bob,${token}:carol` }),
    (e) =>
      e instanceof ConfigError && !e.message.includes(token) &&
      /the token of pair 3 \(user carol\) is the same as that of pair 1 \(user alice\)/.test(e.message),
  );
  assert.equal(loadConfig({ AGENT_API_TOKENS: `${"c".repeat(16)}:alice` }).apiTokens.length, 1);
});

Deno.test("loadConfig() takes AGENT_STREAM as 0, 1, true or false and rejects anything else", () => {
  for (
    const [raw, expected] of [["1", true], ["true", true], ["TRUE", true], ["0", false], ["false", false]]
  ) {
    assert.equal(loadConfig({ AGENT_STREAM: raw as string }).stream, expected, String(raw));
  }
  assert.equal(loadConfig({}).stream, true);
  assert.throws(
    () => loadConfig({ AGENT_STREAM: "yes" }),
    /Invalid AGENT_STREAM="yes": expected 1, 0, true, false/,
  );
});

Deno.test("loadConfig() rejects sizes too small to work: a body limit under 1,024 bytes", () => {
  assert.throws(
    () => loadConfig({ AGENT_MAX_BODY_BYTES: "1023" }),
    (e) =>
      e instanceof ConfigError &&
      /^Invalid AGENT_MAX_BODY_BYTES="1023": expected at least 1024/.test(e.message),
  );
  assert.equal(loadConfig({ AGENT_MAX_BODY_BYTES: "1024" }).maxBodyBytes, 1024);
  assert.equal(loadConfig({}).llmMaxReplyBytes, 1_048_576);
  assert.equal(loadConfig({}).maxToolCallsPerStep, 16);
  assert.equal(loadConfig({}).traceMaxBytes, 64 * 1024 * 1024);
});

Deno.test("requireApiKey() needs a key only when the base URL is not loopback", () => {
  assert.throws(
    () => requireApiKey(loadConfig({})),
    /Missing OPENAI_API_KEY: https:\/\/api.openai.com\/v1 is not/,
  );
  requireApiKey(loadConfig({ OPENAI_API_KEY: "k" }));
  for (const url of ["http://127.0.0.1:1/v1", "http://localhost:8080", "http://[::1]:9/v1"]) {
    assert.ok(isLoopbackUrl(url), url);
    requireApiKey(loadConfig({ OPENAI_BASE_URL: url }));
  }
  assert.ok(!isLoopbackUrl("http://127.example.com"));
});

Deno.test("llmNetHost() fills in the scheme's default port", () => {
  assert.equal(llmNetHost("https://api.openai.com/v1"), "api.openai.com:443");
  assert.equal(llmNetHost("http://localhost/v1"), "localhost:80");
  assert.equal(llmNetHost("http://127.0.0.1:8787"), "127.0.0.1:8787");
});

Deno.test("every setting is documented in the README and .env.example", () => {
  const readme = Deno.readTextFileSync(new URL("../README.md", import.meta.url));
  const example = Deno.readTextFileSync(new URL("../.env.example", import.meta.url));
  for (const [name, setting] of Object.entries(SETTINGS)) {
    assert.match(readme, new RegExp(`^\\|\\s*${name}\\s*\\|`, "m"), `README lacks ${name}`);
    assert.ok(example.includes(`${name}=`), `.env.example lacks ${name}`);
    if (setting.default !== "") {
      assert.ok(readme.includes(setting.default), `README lacks default of ${name}`);
    }
  }
});

Deno.test("loadConfig() with LLM_API=anthropic uses the Anthropic endpoint and key, and says which key is missing", () => {
  const config = loadConfig({ LLM_API: "anthropic", MODEL: "claude-sonnet-4-5" });
  assert.equal(config.baseUrl, "https://api.anthropic.com");
  assert.throws(
    () => requireApiKey(config),
    /^ConfigError: Missing ANTHROPIC_API_KEY: https:\/\/api\.anthropic\.com/,
  );
  const keyed = loadConfig({ LLM_API: "anthropic", MODEL: "claude-sonnet-4-5", ANTHROPIC_API_KEY: "k-1" });
  assert.equal(keyed.apiKey, "k-1");
  assert.throws(
    () => loadConfig({ LLM_API: "soap" }),
    /Invalid LLM_API="soap": expected chat, anthropic, responses/,
  );
});

Deno.test("loadConfig() refuses settings that cannot work together, each in one line naming the fix", () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ MODEL: "claude-sonnet-4-5" }, /MODEL=claude-sonnet-4-5 is an Anthropic model: set LLM_API=anthropic/],
    [{ LLM_API: "responses", MODEL: "claude-opus-4-1" }, /is an Anthropic model/],
    [{ LLM_API: "anthropic" }, /MODEL=gpt-4o-mini is not a Claude model/],
    [
      { AGENT_THINKING_BUDGET: "2048" },
      /AGENT_THINKING_BUDGET is Anthropic's extended thinking: set LLM_API=anthropic/,
    ],
    [
      { LLM_API: "anthropic", MODEL: "claude-sonnet-4-5", AGENT_REASONING_EFFORT: "high" },
      /AGENT_REASONING_EFFORT is not sent to Anthropic/,
    ],
    [
      {
        LLM_API: "anthropic",
        MODEL: "claude-sonnet-4-5",
        AGENT_THINKING_BUDGET: "4096",
        AGENT_MAX_OUTPUT_TOKENS: "4096",
      },
      /AGENT_THINKING_BUDGET=4096 must be less than AGENT_MAX_OUTPUT_TOKENS=4096/,
    ],
    [
      { LLM_API: "anthropic", MODEL: "claude-sonnet-4-5", AGENT_THINKING_BUDGET: "512" },
      /expected at least 1024/,
    ],
  ];
  for (const [env, message] of cases) assert.throws(() => loadConfig(env), message, JSON.stringify(env));
  // A local server may serve any name over any wire (a proxy in front of Claude).
  const local = loadConfig({ MODEL: "claude-sonnet-4-5", OPENAI_BASE_URL: "http://127.0.0.1:4000/v1" });
  assert.equal(local.api, "chat");
});
