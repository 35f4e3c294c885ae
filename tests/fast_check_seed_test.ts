import assert from "node:assert/strict";
import { FIXED_SEED, runSeed } from "./_fast_check.ts";

Deno.test("runSeed() is the fixed seed by default, FC_SEED when set, and a drawn one under FC_RANDOM=1", () => {
  assert.equal(runSeed({}), FIXED_SEED);
  assert.equal(runSeed({ FC_SEED: "" }), FIXED_SEED);
  assert.equal(runSeed({ FC_SEED: "-17" }), -17);
  assert.equal(runSeed({ FC_SEED: "5", FC_RANDOM: "1" }), 5, "a replayed seed wins over a random one");
  const drawn = new Set(Array.from({ length: 8 }, () => runSeed({ FC_RANDOM: "1" })));
  assert.ok(drawn.size > 1, "random seeds differ");
  assert.throws(() => runSeed({ FC_SEED: "abc" }), /FC_SEED must be an integer, got "abc"/);
});
