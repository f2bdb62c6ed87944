// The worker against a real `conveyor serve`: a drain, each way a handler
// can fail, a job outliving its lease, and SIGTERM to a worker process.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import {
  Backpressure,
  createClients,
  PermanentError,
  RetryAfter,
  Worker,
  type Clients,
  type WorkerOptions,
} from "../src/index.js";
import { ADMIN_TOKEN, CapturingLogger, Server, WORKER_TOKEN, delay, enqueue, getJob, states, waitFor } from "./harness.js";

let server: Server;
let task: Clients["task"];
let admin: Clients["admin"];

before(async () => {
  server = new Server();
  await server.start();
  ({ task, admin } = createClients(server.base, { token: ADMIN_TOKEN }));
});

after(async () => {
  if (!server) return;
  const output = server.output;
  assert.equal(await server.dispose(), 0, `conveyor serve did not exit 0:\n${output}`);
});

function worker(logger: CapturingLogger, options: Omit<WorkerOptions, "token" | "logger" | "handleSignals">): Worker {
  return new Worker(server.base, { token: WORKER_TOKEN, logger, handleSignals: false, ...options });
}

async function drain(useJson: boolean, count: number, concurrency: number): Promise<void> {
  const tag = useJson ? "json" : "binary";
  const queues = { [`node-drain-${tag}-a`]: 3, [`node-drain-${tag}-b`]: 1 };
  const names = Object.keys(queues);
  const ids = await enqueue(
    task,
    Array.from({ length: count }, (_, i) => ({ queue: names[i % 2]!, kind: "node_drain", payload: JSON.stringify({ i }) })),
  );
  const calls = new Map<bigint, number>();
  const payloads = new Set<number>();
  let runningNow = 0;
  let maxRunning = 0;
  const logger = new CapturingLogger();
  const w = worker(logger, { queues, concurrency, useJson });
  w.handler("node_drain", async (job) => {
    calls.set(job.id, (calls.get(job.id) ?? 0) + 1);
    payloads.add((JSON.parse(job.payload) as { i: number }).i);
    maxRunning = Math.max(maxRunning, ++runningNow);
    await delay(5); // some work, so that jobs overlap
    runningNow--;
  });
  const run = w.run();
  await waitFor(`${count} jobs handled`, () => calls.size === count, 60_000, () => logger.toString());
  await waitFor(`${count} jobs completed`, async () => (await states(task, ids)).every((s) => s === "completed"), 30_000);
  await w.stop();
  await run;
  assert.deepEqual([...calls.keys()].sort(), [...ids].sort());
  assert.ok([...calls.values()].every((n) => n === 1), "a job ran more than once");
  assert.equal(payloads.size, count);
  assert.ok(maxRunning <= concurrency, `${maxRunning} handlers ran at once, more than ${concurrency}`);
  assert.ok(maxRunning > 1, "handlers never overlapped");
  assert.equal(logger.count(/^(warn|error)/), 0, logger.toString());
}

test("drains 300 jobs at concurrency 8, each run and completed exactly once", { timeout: 120_000 }, () =>
  drain(false, 300, 8),
);

test("drains in JSON mode (useJson)", { timeout: 60_000 }, () => drain(true, 50, 4));

test("RetryAfter: the job comes back after the delay", { timeout: 60_000 }, async () => {
  const [id] = await enqueue(task, [{ queue: "node-retry-after", kind: "node_retry_after", maxAttempts: 3 }]);
  const attempts: { at: number; attempt: number }[] = [];
  const w = worker(new CapturingLogger(), { queues: ["node-retry-after"] });
  w.handler("node_retry_after", (job) => {
    attempts.push({ at: Date.now(), attempt: job.attempt });
    if (attempts.length === 1) throw new RetryAfter(2, "mailbox busy");
  });
  const run = w.run();
  await waitFor("the first attempt", () => attempts.length === 1);
  await waitFor("the job scheduled for its retry", async () => (await getJob(task, id!)).state === "scheduled");
  const scheduled = await getJob(task, id!);
  assert.equal(scheduled.lastError, "mailbox busy");
  assert.ok(Date.parse(scheduled.runAt) - attempts[0]!.at >= 1900, `run_at ${scheduled.runAt} is not ~2 s on`);
  await waitFor("the job completed", async () => (await getJob(task, id!)).state === "completed");
  await w.stop();
  await run;
  assert.equal(attempts.length, 2);
  assert.ok(attempts[1]!.at - attempts[0]!.at >= 1900, `retried after ${attempts[1]!.at - attempts[0]!.at} ms`);
  assert.ok(attempts[1]!.attempt > attempts[0]!.attempt, JSON.stringify(attempts));
});

test("Backpressure: the attempt is given back and the whole queue is held", { timeout: 60_000 }, async () => {
  // maxAttempts 1: a failed attempt would fail the job for good.
  const ids = await enqueue(task, [
    { queue: "node-429", kind: "node_429", maxAttempts: 1 },
    { queue: "node-429", kind: "node_429", maxAttempts: 1 },
  ]);
  const starts: number[] = [];
  const w = worker(new CapturingLogger(), { queues: ["node-429"], concurrency: 1 });
  w.handler("node_429", () => {
    starts.push(Date.now());
    if (starts.length === 1) throw new Backpressure(1.5, "HTTP 429");
  });
  const run = w.run();
  await waitFor("both jobs completed", async () => (await states(task, ids)).every((s) => s === "completed"));
  await w.stop();
  await run;
  assert.equal(starts.length, 3);
  assert.ok(starts[1]! - starts[0]! >= 1450, `the next job started ${starts[1]! - starts[0]!} ms later: the queue was not held`);
  for (const id of ids) assert.equal((await getJob(task, id)).attempt, 1);
});

test("PermanentError fails the job for good with its message", { timeout: 60_000 }, async () => {
  const [id] = await enqueue(task, [{ queue: "node-permanent", kind: "node_permanent", maxAttempts: 5 }]);
  let calls = 0;
  const w = worker(new CapturingLogger(), { queues: ["node-permanent"] });
  w.handler("node_permanent", async () => {
    calls++;
    throw new PermanentError("no such mailbox");
  });
  const run = w.run();
  await waitFor("the job failed", async () => (await getJob(task, id!)).state === "failed");
  await w.stop();
  await run;
  const job = await getJob(task, id!);
  assert.equal(job.lastError, "no such mailbox");
  assert.equal(calls, 1);
});

test("any other error: retried with the engine's backoff, failed when out of attempts", { timeout: 60_000 }, async () => {
  const [flaky, doomed] = await enqueue(task, [
    { queue: "node-errors", kind: "node_flaky", maxAttempts: 3 },
    { queue: "node-errors", kind: "node_doomed", maxAttempts: 1 },
  ]);
  let flakyCalls = 0;
  const w = worker(new CapturingLogger(), { queues: ["node-errors"] });
  w.handler("node_flaky", () => {
    if (++flakyCalls === 1) throw new Error("connection reset");
  });
  w.handler("node_doomed", async () => {
    throw new Error("boom");
  });
  const run = w.run();
  await waitFor("the flaky job completed", async () => (await getJob(task, flaky!)).state === "completed");
  await waitFor("the doomed job failed", async () => (await getJob(task, doomed!)).state === "failed");
  await w.stop();
  await run;
  assert.equal(flakyCalls, 2);
  assert.equal((await getJob(task, doomed!)).lastError, "boom");
});

test("a job running longer than its lease is heartbeated and completes once", { timeout: 60_000 }, async () => {
  const [id] = await enqueue(task, [{ queue: "node-long", kind: "node_long" }]);
  let calls = 0;
  let done = false;
  const logger = new CapturingLogger();
  const w = worker(logger, { queues: ["node-long"], leaseSeconds: 2 });
  w.handler("node_long", async () => {
    calls++;
    await delay(5000); // the work: 2.5 leases
    done = true;
  });
  const run = w.run();
  const expiries = new Set<string>();
  await waitFor("the job running", () => calls === 1);
  while (!done) {
    const job = await getJob(task, id!);
    if (job.state === "running") expiries.add(job.leaseExpiresAt);
    await delay(100);
  }
  await waitFor("the job completed", async () => (await getJob(task, id!)).state === "completed");
  await w.stop();
  await run;
  assert.equal(calls, 1, logger.toString());
  assert.ok(expiries.size >= 3, `the lease was extended ${expiries.size - 1} times: ${[...expiries]}`);
  assert.equal(logger.count(/lease lost|failed_precondition/), 0, logger.toString());
});

test("a job cancelled while it runs: the next heartbeat finds its lease gone, its result is dropped", { timeout: 60_000 }, async () => {
  const [id] = await enqueue(task, [{ queue: "node-cancel", kind: "node_cancel" }]);
  const logger = new CapturingLogger();
  const w = worker(logger, { queues: ["node-cancel"], leaseSeconds: 3 });
  let running = false;
  let finish!: () => void;
  const gate = new Promise<void>((resolve) => (finish = resolve));
  w.handler("node_cancel", async () => {
    running = true;
    await gate;
  });
  const run = w.run();
  await waitFor("the job running", () => running);
  assert.equal((await admin.cancelJob({ id: id! })).job?.state, "cancelled");
  await waitFor("the lease lost", () => logger.count(/lease lost \(failed_precondition/) === 1, 30_000, () => logger.toString());
  finish();
  await waitFor("the result dropped", () => logger.count(/finished after its lease was lost/) === 1, 30_000, () => logger.toString());
  await w.stop();
  await run;
  assert.equal((await getJob(task, id!)).state, "cancelled");
  assert.equal(logger.count(/^error/), 0, logger.toString());
});

test("results for cancelled jobs: Complete and Fail are refused (failed_precondition), logged, dropped", { timeout: 60_000 }, async () => {
  const [done, thrown] = await enqueue(task, [
    { queue: "node-refused", kind: "node_refused", payload: '{"throw":false}' },
    { queue: "node-refused", kind: "node_refused", payload: '{"throw":true}' },
  ]);
  const logger = new CapturingLogger();
  // A 30 s lease: its first heartbeat (10 s on) comes long after the results.
  const w = worker(logger, { queues: ["node-refused"], leaseSeconds: 30 });
  let running = 0;
  let finish!: () => void;
  const gate = new Promise<void>((resolve) => (finish = resolve));
  w.handler("node_refused", async (job) => {
    running++;
    await gate;
    if ((JSON.parse(job.payload) as { throw: boolean }).throw) throw new Error("too late");
  });
  const run = w.run();
  await waitFor("both jobs running", () => running === 2);
  await admin.cancelJob({ id: done! });
  await admin.cancelJob({ id: thrown! });
  finish();
  await waitFor(
    "both refusals logged",
    () =>
      logger.count(new RegExp(`complete of job ${done}: failed_precondition`)) === 1 &&
      logger.count(new RegExp(`fail of job ${thrown}: lease no longer current`)) === 1,
    30_000,
    () => logger.toString(),
  );
  await w.stop();
  await run;
  assert.deepEqual(await states(task, [done!, thrown!]), ["cancelled", "cancelled"]);
  assert.equal(logger.count(/^error|lease lost/), 0, logger.toString());
});

test("SIGTERM: the running job finishes, the process exits 0, claimed jobs not started are released", { timeout: 90_000 }, async () => {
  const queue = "node-sigterm";
  const marker = path.join(server.dir, "sigterm-go");
  const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "sigterm-worker.js");
  const child = spawn(process.execPath, [fixture, server.base, queue, marker], {
    env: { ...process.env, CONVEYOR_WORKER_TOKEN: WORKER_TOKEN },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  try {
    const [a] = await enqueue(task, [{ queue, kind: "node_sigterm" }]);
    await waitFor("the first job started", () => out.includes(`started ${a}\n`), 30_000, () => out);
    child.kill("SIGTERM");
    await waitFor("the worker stopping", () => out.includes("SIGTERM: stopping"), 30_000, () => out);
    // The claim waiting for more (3 free slots) gets these after the stop: they are given back.
    const [b, c] = await enqueue(task, [
      { queue, kind: "node_sigterm" },
      { queue, kind: "node_sigterm" },
    ]);
    await waitFor("claimed jobs released", () => /released \d+ claimed job/.test(out), 30_000, () => out);
    await waitFor("the later jobs available", async () => (await states(task, [b!, c!])).every((s) => s === "available"));
    assert.equal(child.exitCode, null, "the worker exited before its running job finished");
    assert.equal((await getJob(task, a!)).state, "running");
    fs.writeFileSync(marker, "");
    assert.equal(await exited, 0, out);
    assert.ok(out.includes(`finished ${a}\n`), out);
    assert.ok(out.includes("run resolved\n"), out);
    assert.ok(!out.includes(`started ${b}\n`) && !out.includes(`started ${c}\n`), out);
    assert.equal((await getJob(task, a!)).state, "completed");
    assert.deepEqual(await states(task, [b!, c!]), ["available", "available"]);
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
  }
});

test("a job's key: enqueued (binary and JSON), answered by GetJob, seen by the handler; a bad one refused", { timeout: 60_000 }, async () => {
  const json = createClients(server.base, { token: WORKER_TOKEN, useJson: true }).task;
  const binary = createClients(server.base, { token: WORKER_TOKEN }).task;
  const { id: keyed } = await binary.enqueue({ job: { queue: "node-key", kind: "node_key", key: "tenant-\u00e9" } });
  const { id: viaJson } = await json.enqueue({ job: { queue: "node-key", kind: "node_key", key: "tenant-json" } });
  const [plain, batched] = await enqueue(task, [
    { queue: "node-key", kind: "node_key" },
    { queue: "node-key", kind: "node_key", key: "tenant-b" },
  ]);
  assert.equal((await getJob(task, keyed)).key, "tenant-\u00e9");
  assert.equal((await getJob(task, viaJson)).key, "tenant-json");
  assert.equal((await getJob(task, plain!)).key, ""); // the empty key
  const seen = new Map<bigint, string>();
  for (const useJson of [false, true]) {
    const w = worker(new CapturingLogger(), { queues: ["node-key"], useJson });
    w.handler("node_key", (job) => void seen.set(job.id, `${useJson ? "json" : "binary"}:${job.key}`));
    const run = w.run();
    if (!useJson) {
      await waitFor("the keyed jobs handled", () => seen.size === 4);
    } else {
      const { id } = await json.enqueue({ job: { queue: "node-key", kind: "node_key", key: "k".repeat(200) } });
      await waitFor("the longest key handled", () => seen.has(id));
      assert.equal(seen.get(id), `json:${"k".repeat(200)}`);
    }
    await w.stop();
    await run;
  }
  assert.equal(seen.get(keyed), "binary:tenant-\u00e9");
  assert.equal(seen.get(viaJson), "binary:tenant-json");
  assert.equal(seen.get(plain!), "binary:");
  assert.equal(seen.get(batched!), "binary:tenant-b");
  for (const client of [binary, json]) {
    await assert.rejects(
      client.enqueue({ job: { queue: "node-key", kind: "node_key", key: "k".repeat(201) } }),
      (err: Error) => /invalid_argument/.test(err.message) && /job\.key: key is 201 bytes/.test(err.message),
    );
  }
});

test("a wrong token: run() rejects with unauthenticated, claiming nothing", { timeout: 30_000 }, async () => {
  const [id] = await enqueue(task, [{ queue: "node-bad-token", kind: "node_bad_token" }]);
  const logger = new CapturingLogger();
  const w = new Worker(server.base, { token: "not-the-token", queues: ["node-bad-token"], logger, handleSignals: false });
  let calls = 0;
  w.handler("node_bad_token", () => void calls++);
  await assert.rejects(w.run(), (err: Error) => /unauthenticated/i.test(err.message));
  assert.equal(calls, 0);
  assert.equal((await getJob(task, id!)).state, "available");
  assert.equal(logger.count(/refused the claim/), 1, logger.toString());
});

test("bad options and handlers are refused with what to fix", () => {
  const base = "http://127.0.0.1:1";
  assert.throws(() => new Worker("queue.internal:8080", { queues: ["a"] }), /baseUrl must be an http/);
  assert.throws(() => new Worker(base, { queues: [] }), /queues must name 1\.\.100 queues/);
  assert.throws(() => new Worker(base, { queues: { a: 0 } }), /weight of queue "a" must be an integer 1\.\.1000/);
  assert.throws(() => new Worker(base, { queues: ["a", "a"] }), /queue "a" is named twice/);
  assert.throws(() => new Worker(base, { queues: ["a"], concurrency: 0 }), /concurrency must be/);
  assert.throws(() => new Worker(base, { queues: ["a"], concurrency: 2.5 }), /concurrency must be an integer/);
  assert.throws(() => new Worker(base, { queues: ["a"], waitSeconds: 31 }), /waitSeconds must be a number 0\.\.30/);
  assert.throws(() => new Worker(base, { queues: ["a"], leaseSeconds: 0.5 }), /leaseSeconds must be 1\.\.3600/);
  assert.throws(() => new RetryAfter(-1), /seconds must be 0\.\./);
  const w = new Worker(base, { queues: ["a"] });
  w.handler("k", () => {});
  assert.throws(() => w.handler("k", () => {}), /"k" already has a handler/);
  assert.throws(() => w.handler("", () => {}), /kind must be a non-empty string/);
  return assert.rejects(new Worker(base, { queues: ["a"] }).run(), /register a handler first/);
});
