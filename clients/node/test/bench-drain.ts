// Drain throughput of the worker against a real `conveyor serve` (not a
// test: run by hand after `npm run build`):
//   CONVEYOR_BIN=../../build/bin/conveyor node dist/test/bench-drain.js [JOBS] [CONCURRENCY...]
// Enqueues JOBS jobs of a no-op kind into one queue per concurrency and
// reports how fast one worker runs and completes them.
import { Worker, createClients } from "../src/index.js";
import { ADMIN_TOKEN, CapturingLogger, Server, WORKER_TOKEN, enqueue, waitFor } from "./harness.js";

const count = Number(process.argv[2] ?? 3000);
const concurrencies = process.argv.slice(3).map(Number);
const server = new Server();
await server.start();
const { task } = createClients(server.base, { token: ADMIN_TOKEN });
for (const concurrency of concurrencies.length ? concurrencies : [8, 32]) {
  const queue = `bench-${concurrency}`;
  await enqueue(task, Array.from({ length: count }, () => ({ queue, kind: "node_bench" })));
  let done = 0;
  const w = new Worker(server.base, { token: WORKER_TOKEN, queues: [queue], concurrency, handleSignals: false, logger: new CapturingLogger() });
  w.handler("node_bench", () => void done++);
  const start = Date.now();
  const run = w.run();
  await waitFor(`${count} jobs`, () => done === count, 300_000);
  await w.stop(); // the last completions sent
  await run;
  const ms = Date.now() - start;
  console.log(`concurrency ${concurrency}: ${count} jobs in ${ms} ms = ${Math.round((count / ms) * 1000)} jobs/s`);
}
await server.dispose();
