// The server restarted under a running worker (same port, same database):
// the worker logs the outage once, reconnects with backoff, reports the job
// that ran across the restart and runs the jobs enqueued after it.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { createClients, Worker } from "../src/index.js";
import { ADMIN_TOKEN, CapturingLogger, Server, WORKER_TOKEN, enqueue, states, waitFor } from "./harness.js";

const server = new Server();

after(async () => {
  const output = server.output;
  assert.equal(await server.dispose(), 0, `conveyor serve did not exit 0:\n${output}`);
});

test("a server restart under a running worker: it reconnects and finishes", { timeout: 120_000 }, async () => {
  await server.start();
  const { task } = createClients(server.base, { token: ADMIN_TOKEN });
  const queue = "node-restart";
  const logger = new CapturingLogger();
  const w = new Worker(server.base, { token: WORKER_TOKEN, queues: [queue], concurrency: 4, logger, handleSignals: false });
  const calls = new Map<bigint, number>();
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let heldRunning = false;
  w.handler("node_restart", async (job) => {
    calls.set(job.id, (calls.get(job.id) ?? 0) + 1);
    if ((JSON.parse(job.payload) as { hold?: boolean }).hold) {
      heldRunning = true;
      await gate; // runs across the restart
    }
  });
  const first = await enqueue(
    task,
    Array.from({ length: 10 }, (_, i) => ({ queue, kind: "node_restart", payload: JSON.stringify({ hold: i === 0 }) })),
  );
  const run = w.run();
  await waitFor("the first jobs done", async () => {
    if (!heldRunning) return false;
    return (await states(task, first.slice(1))).every((s) => s === "completed");
  });

  assert.equal(await server.stop(), 0, server.output);
  await waitFor("the outage noticed", () => logger.count(/server unreachable/) > 0, 30_000, () => logger.toString());
  await server.start();
  release();
  const second = await enqueue(
    task,
    Array.from({ length: 10 }, () => ({ queue, kind: "node_restart" })),
  );
  const all = [...first, ...second];
  await waitFor(
    "every job completed",
    async () => (await states(task, all)).every((s) => s === "completed"),
    60_000,
    () => logger.toString(),
  );
  await w.stop();
  await run;
  assert.ok(all.every((id) => calls.get(id) === 1), `runs: ${JSON.stringify([...calls].map(([k, v]) => [String(k), v]))}`);
  assert.equal(logger.count(/server unreachable/), 1, logger.toString());
  assert.equal(logger.count(/server reachable again/), 1, logger.toString());
});
