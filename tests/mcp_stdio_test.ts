/** MCP tools of the real reference server over stdio, called by a scripted model through runTurn. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runTurn } from "../src/agent/loop.ts";
import type { McpFile } from "../src/mcp/config.ts";
import { McpTools, startMcpTools } from "../src/mcp/mcp_tools.ts";
import { loadMcpSdk } from "../src/mcp/sdk.ts";
import { harness, lastToolResult, tempDir } from "./_harness.ts";
import { denoEnvironment, denoServer, denoServerArgs, EVERYTHING, mcpTest } from "./_mcp_servers.ts";

const sdk = await loadMcpSdk();

function file(...servers: McpFile["servers"]): McpFile {
  return { path: "mcp.json", servers, approval: undefined };
}

async function withServers<T>(servers: McpFile["servers"], fn: (mcp: McpTools) => Promise<T>): Promise<T> {
  const warnings: string[] = [];
  const mcp = await startMcpTools(file(...servers), {
    sdk,
    timeoutMs: 20_000,
    warn: (l) => warnings.push(l),
  });
  try {
    return await fn(mcp);
  } catch (error) {
    // What the servers warned of says why a tool was missing or a call failed.
    if (warnings.length > 0) console.error(warnings.join("\n"));
    throw error;
  } finally {
    await mcp.close();
  }
}

mcpTest(
  "runTurn() offers the everything server's tools as everything__<tool> and feeds their results back",
  async () => {
    await withServers([denoServer("everything", EVERYTHING, ["stdio"])], async (mcp) => {
      using h = harness([
        { toolCalls: [{ name: "everything__echo", arguments: { message: "hi" } }] },
        { toolCalls: [{ name: "everything__get-sum", arguments: { a: 2, b: "3" } }] },
        { toolCalls: [{ name: "everything__get-structured-content", arguments: { location: "Chicago" } }] },
        { toolCalls: [{ name: "everything__get-tiny-image", arguments: {} }] },
        { content: "done" },
      ], { toolSources: [mcp] });
      const result = await runTurn({ sessionId: "s", userId: "u", message: "use the tools" }, h.agent, h.run);
      assert.equal(result.outcome, "answered");
      const offered = h.llm.requests[0].tools;
      const echo = offered.find((tool) => tool.name === "everything__echo");
      assert.equal(echo?.description, "Echoes back the input string");
      assert.deepEqual((echo?.parameters as { required: string[] }).required, ["message"]);
      assert.ok(offered.some((tool) => tool.name === "calculator"), "built-ins are still offered");
      // Its one tool that must run as an MCP task is not offered (a plain call of it fails with -32600).
      assert.ok(!offered.some((tool) => tool.name === "everything__simulate-research-query"));
      assert.ok(offered.some((tool) => tool.name === "everything__trigger-long-running-operation"));
      assert.deepEqual(lastToolResult(h.llm.requests[1].messages), {
        ok: true,
        data: "Echo: hi",
        error: null,
        truncated: false,
      });
      const invalid = lastToolResult(h.llm.requests[2].messages);
      assert.equal(invalid.ok, false);
      assert.match(String(invalid.error), /invalid arguments: \$\.b: expected number, got string/);
      const structured = lastToolResult(h.llm.requests[3].messages);
      assert.equal(structured.ok, true);
      assert.equal(
        typeof (structured.data as { structured: { temperature: number } }).structured.temperature,
        "number",
      );
      const image = lastToolResult(h.llm.requests[4].messages);
      assert.match(String(image.data), /\[image image\/png, \d+ bytes, not shown\]/);
      assert.deepEqual(mcp.health().everything.state, "ready");
    });
  },
);

mcpTest(
  "an MCP server killed mid-call fails that call, restarts on next use, and is unavailable after 3 restarts in 5 minutes",
  async () => {
    using dir = tempDir();
    const pids = join(dir.path, "pids");
    // A shell that notes its pid and becomes the server, so the test can kill the server itself.
    const server = {
      name: "everything",
      transport: "stdio" as const,
      command: "sh",
      // Locked and with this process's cache, certificates and proxies, as every test server runs.
      args: ["-c", `echo $$ >> '${pids}'; exec deno ${denoServerArgs(EVERYTHING, ["stdio"]).join(" ")}`],
      env: denoEnvironment(),
    };
    await withServers([server], async (mcp) => {
      const serverPid = () => Number(Deno.readTextFileSync(pids).trim().split("\n").at(-1));
      // A server that is gone already (it ended the call itself) is not an error of the test's own.
      const killPid = (pid: number) => {
        try {
          Deno.kill(pid, "SIGKILL");
        } catch (error) {
          if (!(error instanceof Deno.errors.NotFound)) throw error;
        }
      };
      const kill = () => killPid(serverPid());
      let timer: ReturnType<typeof setTimeout> | undefined;
      const echo = (message: string) => ({
        toolCalls: [{ name: "everything__echo", arguments: { message } }],
      });
      const slow = {
        name: "everything__trigger-long-running-operation",
        arguments: { duration: 5, steps: 5 },
      };
      const script = [
        echo("one"),
        { toolCalls: [slow] },
        echo("two"),
        echo("three"),
        echo("four"),
        echo("five"),
      ];
      using h = harness([...script, { content: "ok" }], { toolSources: [mcp], maxSteps: 10 });
      const results: Record<string, unknown>[] = [];
      const execute = h.agent.tools.execute.bind(h.agent.tools);
      h.agent.tools.execute = async (call, context) => {
        const n = results.length;
        // Call 2 is killed while it runs; calls 4, 5 and 6 find the server killed before them.
        if (n === 1) {
          const pid = serverPid();
          timer = setTimeout(() => killPid(pid), 500);
        }
        if (n >= 3) {
          kill();
          while (mcp.health().everything.state === "ready") await new Promise((r) => setTimeout(r, 20));
        }
        const result = await execute(call, context);
        results.push(result as unknown as Record<string, unknown>);
        return result;
      };
      const result = await runTurn({ sessionId: "s", userId: "u", message: "echo" }, h.agent, h.run)
        .finally(() => clearTimeout(timer));
      assert.equal(result.outcome, "answered");
      assert.deepEqual(
        results.map((r) => r.ok),
        [true, false, true, true, true, false],
        JSON.stringify(results),
      );
      assert.match(String(results[1].error), /everything/);
      assert.deepEqual([0, 2, 3, 4].map((i) => results[i].data), [
        "Echo: one",
        "Echo: two",
        "Echo: three",
        "Echo: four",
      ]);
      assert.match(String(results[5].error), /unavailable: it stopped 3 times within 5 minutes/);
      assert.equal(mcp.health().everything.state, "unavailable");
      assert.equal(mcp.health().everything.restarts, 3);
    });
  },
);

mcpTest(
  "an MCP call that reports progress outlives its deadline, each notification starting it again, up to maxCallMs in all",
  async () => {
    const warnings: string[] = [];
    const mcp = await startMcpTools(file(denoServer("everything", EVERYTHING, ["stdio"])), {
      sdk,
      timeoutMs: 1500,
      startTimeoutMs: 60_000,
      maxCallMs: 4000,
      warn: (line) => warnings.push(line),
    });
    try {
      assert.deepEqual(warnings, [
        'MCP tool "simulate-research-query" of server "everything" is left out: it requires task-based ' +
        "execution, which this client does not run",
      ]);
      const long = (duration: number) => ({
        toolCalls: [{
          name: "everything__trigger-long-running-operation",
          // Progress every half second, against a deadline of 1.5 s.
          arguments: { duration, steps: duration * 2 },
        }],
      });
      using h = harness([long(3), long(8), { content: "done" }], { toolSources: [mcp] });
      const result = await runTurn({ sessionId: "s", userId: "u", message: "go" }, h.agent, h.run);
      assert.equal(result.outcome, "answered");
      const within = lastToolResult(h.llm.requests[1].messages);
      assert.equal(within.ok, true, JSON.stringify(within));
      assert.match(JSON.stringify(within.data), /Long running operation completed/i);
      const beyond = lastToolResult(h.llm.requests[2].messages);
      assert.equal(beyond.ok, false);
      assert.match(String(beyond.error), /time/i);
    } finally {
      await mcp.close();
    }
  },
);
