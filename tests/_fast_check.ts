/**
 * fast-check with the seed of this run, for every property test: a fixed seed in `deno task test`, so the
 * suite checks the same cases each run; `FC_SEED=<n>` replays a seed; `FC_RANDOM=1` (as `deno task test:random`
 * sets it) draws a new one. A seed that is not the fixed one is printed, so a failure can be replayed.
 * @module
 */
import { fc } from "./_dev_deps.ts";

/** The seed of `deno task test`. */
export const FIXED_SEED = 20260101;

/** The seed this run uses: FC_SEED, else a random one under FC_RANDOM=1, else {@linkcode FIXED_SEED}. */
export function runSeed(env: { FC_SEED?: string; FC_RANDOM?: string }): number {
  if (env.FC_SEED !== undefined && env.FC_SEED !== "") {
    const seed = Number(env.FC_SEED);
    if (!Number.isSafeInteger(seed)) {
      throw new TypeError(`Cannot seed fast-check: FC_SEED must be an integer, got "${env.FC_SEED}"`);
    }
    return seed;
  }
  if (env.FC_RANDOM === "1") return crypto.getRandomValues(new Int32Array(1))[0];
  return FIXED_SEED;
}

const seed = runSeed({ FC_SEED: Deno.env.get("FC_SEED"), FC_RANDOM: Deno.env.get("FC_RANDOM") });
fc.configureGlobal({ seed });
if (seed !== FIXED_SEED) {
  console.log(`fast-check seed ${seed} (replay: FC_SEED=${seed} deno task test:random)`);
}

export { fc };
