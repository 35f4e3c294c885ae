/**
 * The test-only npm packages, pinned in this one place. They are imported by full `npm:` specifier from
 * here, never through `deno.json`'s import map: `chat`, `serve` and `demo` must start with nothing from a
 * registry, and an import-map entry would make Deno install these for them too. Tests take `fc` from
 * `tests/_fast_check.ts`, which seeds it.
 * @module
 */
export { default as fc } from "npm:fast-check@4.11.0";
export { Ajv2020 } from "npm:ajv@8.20.0/dist/2020.js";
export { default as OpenAI } from "npm:openai@7.59.0";
export { default as puppeteer } from "npm:puppeteer-core@25.16.0";
export type { Browser, Page } from "npm:puppeteer-core@25.16.0";
export { zodResponseFormat, zodTextFormat } from "npm:openai@7.59.0/helpers/zod";
export { z } from "npm:zod@4.6.7";

/**
 * The Vercel AI SDK (`ai`, its OpenAI-compatible provider and its default OpenAI provider, which speaks the
 * Responses API), loaded only when called: its gateway reads the
 * host name as it loads, which needs `--allow-sys=hostname`, a permission the tests do not run with. So a test
 * calls it in a child process granted that (`tests/fixtures/ai_sdk_client.ts`); the literal specifiers keep
 * the packages pinned here, type-checked and locked in `tests/deno.lock` like the others.
 */
export async function loadAiSdk() {
  const [ai, compatible, openai] = await Promise.all([
    import("npm:ai@7.0.185"),
    import("npm:@ai-sdk/openai-compatible@3.0.97"),
    import("npm:@ai-sdk/openai@4.0.118"),
  ]);
  return {
    generateObject: ai.generateObject,
    streamObject: ai.streamObject,
    generateText: ai.generateText,
    streamText: ai.streamText,
    createOpenAICompatible: compatible.createOpenAICompatible,
    createOpenAI: openai.createOpenAI,
  };
}
