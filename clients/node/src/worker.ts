// A worker of conveyor.v1.WorkerService: long-polls Claim for the kinds it
// has handlers for, never more jobs than it has free slots, runs them,
// batches Complete, reports failures with Fail, heartbeats running jobs every
// third of their lease and gives unstarted jobs back with Release at stop.
// Every call to the server that fails for a reason a retry can fix (the
// server down or restarting) is retried with exponential backoff.
import os from "node:os";
import { Code, ConnectError } from "@connectrpc/connect";
import { createClients, type Clients } from "./client.js";
import type { Job } from "./gen/conveyor/v1/task_pb.js";
import type { Lease, LeaseResult } from "./gen/conveyor/v1/worker_pb.js";

/** Thrown by a handler: retry the job no earlier than `seconds` from now. */
export class RetryAfter extends Error {
  readonly seconds: number;
  constructor(seconds: number, message?: string) {
    if (!Number.isFinite(seconds) || seconds < 0 || seconds > MAX_RETRY_AFTER_S) {
      throw new RangeError(`RetryAfter: seconds must be 0..${MAX_RETRY_AFTER_S} (0: the engine's backoff), got ${seconds}`);
    }
    super(message ?? `retry after ${seconds} s`);
    this.name = "RetryAfter";
    this.seconds = seconds;
  }
}

/**
 * Thrown by a handler when the downstream asked to wait (HTTP 429/503, a quota
 * error). Not a failure: the job goes back with its attempt given back, and the
 * server holds the whole queue (every worker and its own handlers) for
 * `seconds` (0: the server's hold, doubling while they follow each other). The
 * Fail is sent before the handler's slot claims again.
 */
export class Backpressure extends RetryAfter {
  constructor(seconds = 0, message?: string) {
    super(seconds, message ?? "the downstream asked to wait");
    this.name = "Backpressure";
  }
}

/** Thrown by a handler: fail the job for good, whatever attempts it has left. */
export class PermanentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PermanentError";
  }
}

export type Handler = (job: Job) => unknown;

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export interface WorkerOptions {
  /** [server] worker_token (or the admin token); sent as a bearer token. */
  token?: string;
  /** Queues to take jobs from: names, or names with weights 1..1000. */
  queues: string[] | Record<string, number>;
  /** Jobs run at once (1..1000); default 10. */
  concurrency?: number;
  /** How long a claim waits for a job (0..30); default 20. */
  waitSeconds?: number;
  /** Lease length asked for (1..3600); default 0: the server's [engine] lease_ms. */
  leaseSeconds?: number;
  /** How long a stop waits for running handlers; default 30000. */
  shutdownTimeoutMs?: number;
  /** The proto3 JSON mapping instead of binary protobuf. */
  useJson?: boolean;
  /** Names this worker in the server's logs; default "<hostname>:<pid>". */
  workerId?: string;
  /** Default: console. */
  logger?: Logger;
  /** Stop on SIGTERM and SIGINT while run() runs; default true. */
  handleSignals?: boolean;
}

const MAX_RETRY_AFTER_S = 30 * 24 * 3600;
const MAX_LEASES_PER_CALL = 1000;
const HEARTBEAT_TICK_MS = 200;
const CALL_TIMEOUT_MS = 10_000;
// A claim's call timeout is its wait plus this, so a long poll is never cut short.
const CLAIM_MARGIN_MS = 10_000;
// After handlers are done (or given up on), results still unsent are retried
// this long before they are dropped (their jobs then run again when their
// leases expire).
const FLUSH_TIMEOUT_MS = 10_000;
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 10_000;

// Codes a retry cannot fix: the request or the configuration is wrong.
const PERMANENT_CODES = new Set([
  Code.InvalidArgument,
  Code.Unauthenticated,
  Code.PermissionDenied,
  Code.Unimplemented,
  Code.FailedPrecondition,
  Code.NotFound,
  Code.OutOfRange,
]);

function retryable(err: unknown): boolean {
  return !(err instanceof ConnectError && PERMANENT_CODES.has(err.code));
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message || err.name : String(err);
}

/** 100 ms doubling to 10 s, each delay drawn from [d/2, d). */
class Backoff {
  private attempt = 0;
  next(): number {
    const d = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** this.attempt);
    if (d < BACKOFF_MAX_MS) this.attempt++;
    return d / 2 + (Math.random() * d) / 2;
  }
  reset(): void {
    this.attempt = 0;
  }
}

// A claimed job until its result (or release) is acknowledged.
interface Active {
  job: Job;
  lease: Lease;
  leaseSeconds: number;
  heartbeatDue: number; // Date.now() value
  running: boolean;
  lost: boolean; // a heartbeat found the lease gone
  settling: boolean; // a release is on its way: no more heartbeats
  reported?: boolean; // its result was sent by the handler's own slot (backpressure)
}

export class Worker {
  private readonly clients: Clients;
  private readonly queues: { queue: string; weight: number }[];
  private readonly concurrency: number;
  private readonly waitSeconds: number;
  private readonly leaseSeconds: number;
  private readonly shutdownTimeoutMs: number;
  private readonly workerId: string;
  private readonly log: Logger;
  private readonly handleSignals: boolean;
  private readonly handlers = new Map<string, Handler>();

  private readonly active = new Map<bigint, Active>();
  private running = 0;
  private waiters: (() => void)[] = [];
  private stopping = false;
  private resolveStop!: () => void;
  private readonly stopRequested = new Promise<void>((resolve) => (this.resolveStop = resolve));
  private resolveFlushing!: () => void;
  // Resolves when the stop's last phase begins: retries then back off no
  // further than flushDeadline.
  private readonly flushing = new Promise<void>((resolve) => (this.resolveFlushing = resolve));
  private claimAbort: AbortController | null = null;
  private runPromise: Promise<void> | null = null;
  private fatal: unknown = null;
  private outage = false;
  private flushDeadline = Infinity;

  private pendingComplete: Active[] = [];
  private completeSoon: NodeJS.Immediate | null = null;
  private completeInFlight: Promise<void> | null = null;
  private heartbeatInFlight: Promise<void> | null = null;
  private heartbeatRetryAt = 0;
  private readonly heartbeatBackoff = new Backoff();
  private readonly inflight = new Set<Promise<void>>();

  constructor(baseUrl: string, options: WorkerOptions) {
    let url: URL;
    try {
      url = new URL(baseUrl);
    } catch {
      throw new TypeError(`Worker: baseUrl must be an http:// or https:// URL, got ${JSON.stringify(baseUrl)}`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`Worker: baseUrl must be an http:// or https:// URL, got ${JSON.stringify(baseUrl)}`);
    }
    this.queues = queueWeights(options?.queues);
    this.concurrency = intOption("concurrency", options.concurrency, 10, 1, 1000);
    this.waitSeconds = numberOption("waitSeconds", options.waitSeconds, 20, 0, 30);
    this.leaseSeconds = numberOption("leaseSeconds", options.leaseSeconds, 0, 0, 3600);
    if (this.leaseSeconds > 0 && this.leaseSeconds < 1) {
      throw new RangeError(`Worker: leaseSeconds must be 1..3600 (or 0: the server's lease_ms), got ${this.leaseSeconds}`);
    }
    this.shutdownTimeoutMs = numberOption("shutdownTimeoutMs", options.shutdownTimeoutMs, 30_000, 0, Infinity);
    this.workerId = options.workerId ?? `${os.hostname()}:${process.pid}`;
    if (this.workerId.length > 200) throw new RangeError("Worker: workerId must be at most 200 characters");
    this.log = options.logger ?? console;
    this.handleSignals = options.handleSignals ?? true;
    this.clients = createClients(baseUrl, { token: options.token, useJson: options.useJson });
  }

  /** Runs `fn` for jobs of this kind; a thrown error fails the attempt. */
  handler(kind: string, fn: Handler): this {
    if (typeof kind !== "string" || kind === "") throw new TypeError("Worker.handler: kind must be a non-empty string");
    if (typeof fn !== "function") throw new TypeError(`Worker.handler: the handler of "${kind}" must be a function`);
    if (this.handlers.has(kind)) throw new Error(`Worker.handler: "${kind}" already has a handler`);
    if (this.handlers.size >= 100) throw new RangeError("Worker.handler: at most 100 kinds per worker");
    this.handlers.set(kind, fn);
    return this;
  }

  /**
   * Claims and runs jobs until stop() (or SIGTERM/SIGINT): then claims no
   * more, lets running handlers finish (up to shutdownTimeoutMs), gives back
   * jobs not started, sends the results and resolves. Rejects when the server
   * refuses the worker for good (a wrong token, a bad queue name).
   */
  run(): Promise<void> {
    if (this.runPromise) return Promise.reject(new Error("Worker.run: a worker runs once"));
    if (this.handlers.size === 0) return Promise.reject(new Error("Worker.run: register a handler first"));
    this.runPromise = this.runUntilStopped();
    return this.runPromise;
  }

  /** Starts a graceful stop; resolves when run() has finished. */
  stop(): Promise<void> {
    this.requestStop();
    return (this.runPromise ?? Promise.resolve()).catch(() => {});
  }

  private requestStop(): void {
    if (this.stopping) return;
    this.stopping = true;
    this.resolveStop();
    this.changed();
  }

  private async runUntilStopped(): Promise<void> {
    const onSignal = (signal: NodeJS.Signals) => {
      this.log.info(`conveyor-worker: ${signal}: stopping (running jobs get ${this.shutdownTimeoutMs} ms)`);
      this.requestStop();
    };
    if (this.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const heartbeats = setInterval(() => this.heartbeatTick(), HEARTBEAT_TICK_MS);
    try {
      const claims = this.claimLoop();
      await this.stopRequested;
      const deadline = Date.now() + this.shutdownTimeoutMs;
      while (this.running > 0 && Date.now() < deadline) await this.nextChange(deadline - Date.now());
      // The claim still waiting (kept so that jobs it was granted are given
      // back rather than lost) is no longer needed.
      this.claimAbort?.abort();
      await claims;
      const unfinished = [...this.active.values()].filter((a) => a.running);
      if (unfinished.length > 0) {
        this.log.warn(
          `conveyor-worker: ${unfinished.length} job(s) still running after ${this.shutdownTimeoutMs} ms: releasing them (their handlers' results will be dropped)`,
        );
        this.track(this.release(unfinished));
      }
      this.flushDeadline = Date.now() + FLUSH_TIMEOUT_MS;
      this.resolveFlushing();
      await this.flushAll();
    } finally {
      clearInterval(heartbeats);
      if (this.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
    if (this.fatal) throw this.fatal;
    this.log.info("conveyor-worker: stopped");
  }

  private async claimLoop(): Promise<void> {
    const backoff = new Backoff();
    while (!this.stopping) {
      const free = this.concurrency - this.running;
      if (free <= 0) {
        await this.nextChange();
        continue;
      }
      const abort = new AbortController();
      this.claimAbort = abort;
      const started = Date.now();
      let response;
      try {
        response = await this.clients.worker.claim(
          {
            queues: this.queues,
            kinds: [...this.handlers.keys()],
            maxJobs: free,
            waitSeconds: this.waitSeconds,
            workerId: this.workerId,
            leaseSeconds: this.leaseSeconds,
          },
          { signal: abort.signal, timeoutMs: this.waitSeconds * 1000 + CLAIM_MARGIN_MS },
        );
      } catch (err) {
        if (abort.signal.aborted) break;
        if (!retryable(err)) {
          this.log.error(`conveyor-worker: the server refused the claim, stopping: ${describe(err)}`);
          this.fatal = err;
          this.requestStop();
          break;
        }
        this.noteFailure("claim", err);
        await this.pause(backoff.next(), "stop");
        continue;
      } finally {
        this.claimAbort = null;
      }
      this.noteSuccess();
      backoff.reset();
      const unstarted: Active[] = [];
      const now = Date.now();
      // The server always says; the fallback only keeps heartbeats sane.
      const leaseSeconds = response.leaseSeconds > 0 ? response.leaseSeconds : this.leaseSeconds || 30;
      for (const { job, lease } of response.jobs) {
        if (!job || !lease) continue;
        const a: Active = {
          job,
          lease,
          leaseSeconds,
          heartbeatDue: now + (leaseSeconds * 1000) / 3,
          running: false,
          lost: false,
          settling: false,
        };
        this.active.set(lease.jobId, a);
        if (this.stopping) unstarted.push(a);
        else this.start(a);
      }
      if (unstarted.length > 0) {
        this.log.info(`conveyor-worker: released ${unstarted.length} claimed job(s) not started before the stop`);
        this.track(this.release(unstarted));
      }
      // A server that answers empty at once (it is stopping) is not polled in a tight loop.
      if (response.jobs.length === 0 && Date.now() - started < 50) await this.pause(100, "stop");
    }
  }

  private start(a: Active): void {
    a.running = true;
    this.running++;
    const fn = this.handlers.get(a.job.kind);
    void (async () => {
      let error: unknown = null;
      let failed = false;
      try {
        if (!fn) throw new PermanentError(`no handler for kind "${a.job.kind}" in this worker`);
        await fn(a.job);
      } catch (err) {
        failed = true;
        error = err;
      }
      if (failed && error instanceof Backpressure && !a.settling && !a.lost) {
        // The hold must be in place before this slot claims the next job.
        await this.fail(a, error);
        failed = false;
        a.reported = true;
      }
      a.running = false;
      this.running--;
      this.changed();
      if (a.settling) {
        this.log.warn(`conveyor-worker: job ${a.job.id} finished after it was released at stop; its result is dropped`);
      } else if (a.lost) {
        this.log.warn(`conveyor-worker: job ${a.job.id} finished after its lease was lost; its result is dropped`);
        this.active.delete(a.lease.jobId);
      } else if (a.reported) {
        // sent above
      } else if (failed) {
        this.track(this.fail(a, error));
      } else {
        this.pendingComplete.push(a);
        this.scheduleComplete();
      }
    })();
  }

  // Complete: one call in flight at a time. A completion is sent at once
  // (with those of the same turn of the event loop) when no call is in
  // flight, else with all that finish meanwhile when the call returns. A
  // timed flush (wait up to N ms to fill a batch) would cost throughput: the
  // server holds each job's max_workers permit until its result lands.
  private scheduleComplete(): void {
    if (this.completeInFlight || this.completeSoon) return;
    this.completeSoon = setImmediate(() => this.flushCompletes());
  }

  private flushCompletes(): void {
    if (this.completeSoon) clearImmediate(this.completeSoon);
    this.completeSoon = null;
    if (this.completeInFlight || this.pendingComplete.length === 0) return;
    const batch = this.pendingComplete.splice(0, MAX_LEASES_PER_CALL);
    this.completeInFlight = this.leaseCall("complete", batch, (leases) =>
      this.clients.worker.complete({ leases }, { timeoutMs: CALL_TIMEOUT_MS }),
    ).finally(() => {
      this.completeInFlight = null;
      if (this.pendingComplete.length > 0) this.flushCompletes();
    });
  }

  private release(entries: Active[]): Promise<void> {
    for (const a of entries) a.settling = true;
    const calls: Promise<void>[] = [];
    for (let i = 0; i < entries.length; i += MAX_LEASES_PER_CALL) {
      const batch = entries.slice(i, i + MAX_LEASES_PER_CALL);
      calls.push(
        this.leaseCall("release", batch, (leases) => this.clients.worker.release({ leases }, { timeoutMs: CALL_TIMEOUT_MS })),
      );
    }
    return Promise.all(calls).then(() => {});
  }

  // Sends one batch of leases (Complete or Release), retrying what a retry can
  // fix until flushDeadline; every entry leaves `active` when done.
  private async leaseCall(
    what: string,
    batch: Active[],
    call: (leases: Lease[]) => Promise<{ results: LeaseResult[] }>,
  ): Promise<void> {
    const backoff = new Backoff();
    for (;;) {
      try {
        const { results } = await call(batch.map((a) => a.lease));
        this.noteSuccess();
        batch.forEach((a, i) => {
          const r = results[i];
          if (r && r.code !== "ok") {
            this.log.warn(`conveyor-worker: ${what} of job ${a.job.id}: ${r.code} (${r.message}); result discarded`);
          }
          this.active.delete(a.lease.jobId);
        });
        return;
      } catch (err) {
        if (!retryable(err) || Date.now() >= this.flushDeadline) {
          this.log.error(
            `conveyor-worker: ${what} of ${batch.length} job(s) failed: ${describe(err)}; they run again when their leases expire`,
          );
          for (const a of batch) this.active.delete(a.lease.jobId);
          return;
        }
        this.noteFailure(what, err);
        await this.pause(Math.min(backoff.next(), this.flushDeadline - Date.now()), "flush");
      }
    }
  }

  private async fail(a: Active, err: unknown): Promise<void> {
    let retryAfterSeconds = 0;
    let permanent = false;
    const backpressure = err instanceof Backpressure;
    if (err instanceof RetryAfter) retryAfterSeconds = err.seconds;
    else if (err instanceof PermanentError) permanent = true;
    const error = describe(err).slice(0, 4096);
    const backoff = new Backoff();
    for (;;) {
      try {
        await this.clients.worker.fail(
          { lease: a.lease, error, retryAfterSeconds, permanent, backpressure },
          { timeoutMs: CALL_TIMEOUT_MS },
        );
        this.noteSuccess();
        break;
      } catch (e) {
        if (e instanceof ConnectError && e.code === Code.FailedPrecondition) {
          this.log.warn(`conveyor-worker: fail of job ${a.job.id}: lease no longer current (${e.rawMessage}); result discarded`);
          break;
        }
        if (!retryable(e) || Date.now() >= this.flushDeadline) {
          this.log.error(`conveyor-worker: fail of job ${a.job.id} failed: ${describe(e)}; it runs again when its lease expires`);
          break;
        }
        this.noteFailure("fail", e);
        await this.pause(Math.min(backoff.next(), this.flushDeadline - Date.now()), "flush");
      }
    }
    this.active.delete(a.lease.jobId);
  }

  // Every HEARTBEAT_TICK_MS: extends the leases due within the next tick, in
  // one call per lease length (normally one).
  private heartbeatTick(): void {
    const now = Date.now();
    if (this.heartbeatInFlight || now < this.heartbeatRetryAt) return;
    const groups = new Map<number, Active[]>();
    for (const a of this.active.values()) {
      if (a.lost || a.settling || a.heartbeatDue > now + HEARTBEAT_TICK_MS) continue;
      const g = groups.get(a.leaseSeconds);
      if (g) g.push(a);
      else groups.set(a.leaseSeconds, [a]);
    }
    if (groups.size === 0) return;
    this.heartbeatInFlight = this.heartbeat(groups).finally(() => (this.heartbeatInFlight = null));
  }

  private async heartbeat(groups: Map<number, Active[]>): Promise<void> {
    for (const [leaseSeconds, entries] of groups) {
      for (let i = 0; i < entries.length; i += MAX_LEASES_PER_CALL) {
        const batch = entries.slice(i, i + MAX_LEASES_PER_CALL);
        const sent = Date.now();
        try {
          const { results } = await this.clients.worker.heartbeat(
            { leases: batch.map((a) => a.lease), leaseSeconds },
            { timeoutMs: Math.min(CALL_TIMEOUT_MS, Math.max(1000, (leaseSeconds * 1000) / 3)) },
          );
          this.noteSuccess();
          this.heartbeatBackoff.reset();
          batch.forEach((a, j) => {
            const r = results[j];
            if (this.active.get(a.lease.jobId) !== a) return; // reported meanwhile
            if (r && r.code === "deadline_exceeded") {
              // The job ran past its time limit (job_timeout_s): the server failed the attempt.
              a.lost = true;
              this.log.warn(
                `conveyor-worker: job ${a.job.id}: timed out: the server failed this attempt at its deadline (${r.message}); no more heartbeats, its result will not be reported`,
              );
            } else if (r && r.code !== "ok") {
              a.lost = true;
              this.log.warn(
                `conveyor-worker: job ${a.job.id}: lease lost (${r.code}: ${r.message}); no more heartbeats, its result will not be reported`,
              );
            } else {
              a.heartbeatDue = sent + (leaseSeconds * 1000) / 3;
            }
          });
        } catch (err) {
          this.noteFailure("heartbeat", err);
          this.heartbeatRetryAt = Date.now() + this.heartbeatBackoff.next();
          return;
        }
      }
    }
  }

  // Waits for the fails, releases and completes in flight (and those still
  // pending) to be sent.
  private async flushAll(): Promise<void> {
    for (;;) {
      this.flushCompletes();
      const waiting = [...this.inflight];
      if (this.completeInFlight) waiting.push(this.completeInFlight);
      if (this.heartbeatInFlight) waiting.push(this.heartbeatInFlight);
      if (waiting.length === 0) return;
      await Promise.all(waiting);
    }
  }

  private track(p: Promise<void>): void {
    const tracked: Promise<void> = p
      .catch((err) => this.log.error(`conveyor-worker: ${describe(err)}`))
      .finally(() => this.inflight.delete(tracked));
    this.inflight.add(tracked);
  }

  // Logs once per outage, whichever call finds it.
  private noteFailure(what: string, err: unknown): void {
    if (this.outage) return;
    this.outage = true;
    this.log.warn(`conveyor-worker: server unreachable (${what}: ${describe(err)}); retrying with backoff`);
  }

  private noteSuccess(): void {
    if (!this.outage) return;
    this.outage = false;
    this.log.info("conveyor-worker: server reachable again");
  }

  private changed(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  // Sleeps ms; a pause of the claim loop ends at a stop, a retry's when the
  // stop's last phase begins (then retries wait no longer than flushDeadline).
  // No timer is left behind to keep the process alive.
  private pause(ms: number, wake: "stop" | "flush"): Promise<void> {
    if (wake === "stop" && this.stopping) return Promise.resolve();
    const until = wake === "stop" ? this.stopRequested : this.flushDeadline === Infinity ? this.flushing : null;
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, Math.max(0, ms));
      void until?.then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  // Resolves at the next change of running or stopping (or after ms).
  private nextChange(ms?: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = ms === undefined ? undefined : setTimeout(resolve, ms);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

function queueWeights(queues: WorkerOptions["queues"] | undefined): { queue: string; weight: number }[] {
  const entries: [string, number][] = Array.isArray(queues)
    ? queues.map((q) => [q, 1])
    : queues && typeof queues === "object"
      ? Object.entries(queues)
      : [];
  if (entries.length === 0 || entries.length > 100) {
    throw new TypeError('Worker: queues must name 1..100 queues: ["a", "b"] or weights {"a": 3, "b": 1}');
  }
  const seen = new Set<string>();
  return entries.map(([queue, weight]) => {
    if (typeof queue !== "string" || queue === "") throw new TypeError("Worker: a queue name must be a non-empty string");
    if (seen.has(queue)) throw new TypeError(`Worker: queue "${queue}" is named twice`);
    seen.add(queue);
    if (!Number.isInteger(weight) || weight < 1 || weight > 1000) {
      throw new RangeError(`Worker: the weight of queue "${queue}" must be an integer 1..1000, got ${weight}`);
    }
    return { queue, weight };
  });
}

function numberOption(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || Number.isNaN(value) || value < min || value > max) {
    throw new RangeError(`Worker: ${name} must be a number ${min}..${max}, got ${value}`);
  }
  return value;
}

function intOption(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  const n = numberOption(name, value, fallback, min, max);
  if (!Number.isInteger(n)) throw new RangeError(`Worker: ${name} must be an integer ${min}..${max}, got ${n}`);
  return n;
}
