/**
 * Anthropic Messages (`LLM_API=anthropic`). Skeleton: replaced by the dialect.
 * @module
 */
import type { Dialect } from "./dialect.ts";
import { CHAT_COMPLETIONS } from "./stream.ts";

/** Anthropic Messages: `POST {baseUrl}/v1/messages`. */
export const ANTHROPIC_MESSAGES: Dialect = { ...CHAT_COMPLETIONS, path: "/v1/messages" };
