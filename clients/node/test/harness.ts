// A real `conveyor serve` for the tests: SQLite in a temp dir, the worker and
// admin tokens, 127.0.0.1 on a free port. CONVEYOR_BIN names the binary;
// CONVEYOR_PLUGIN_DIR the plugins (default: the binary's own).
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import type { Logger } from "../src/index.js";
import type { Clients } from "../src/client.js";

export const ADMIN_TOKEN = "admin-secret";
export const WORKER_TOKEN = "worker-secret";

const conveyorBin = process.env.CONVEYOR_BIN;
if (!conveyorBin) throw new Error("set CONVEYOR_BIN=/path/to/conveyor");

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.on("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls cond every 50 ms until it holds; throws after timeoutMs. */
export async function waitFor(
  what: string,
  cond: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
  detail: () => string = () => "",
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${detail()}`);
    await delay(50);
  }
}

export class Server {
  readonly dir = fs.mkdtempSync(path.join(os.tmpdir(), "conveyor-node-worker-"));
  port = 0;
  output = "";
  private child: ChildProcess | null = null;
  private exited: Promise<number | null> = Promise.resolve(null);

  get base(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Starts the server (again: the same port and database). */
  async start(): Promise<void> {
    if (this.port === 0) this.port = await freePort();
    const config = path.join(this.dir, "conveyor.toml");
    const pluginDir = process.env.CONVEYOR_PLUGIN_DIR;
    fs.writeFileSync(
      config,
      [
        "[storage]",
        'plugin = "sqlite"',
        pluginDir ? `plugin_dir = ${JSON.stringify(pluginDir)}` : "",
        "[storage.options]",
        `path = ${JSON.stringify(path.join(this.dir, "conveyor.db"))}`,
        "[engine]",
        "shutdown_timeout_ms = 500",
        // Expired leases come back fast, so a missed heartbeat shows as a second run.
        "rescue_interval_ms = 200",
        "retry_backoff_base_ms = 100",
        "[server]",
        `listen = "127.0.0.1:${this.port}"`,
        `admin_token = "${ADMIN_TOKEN}"`,
        `worker_token = "${WORKER_TOKEN}"`,
        "",
      ].join("\n"),
    );
    const child = spawn(conveyorBin!, ["--config", config, "serve"], { stdio: ["ignore", "pipe", "pipe"] });
    this.child = child;
    child.stdout!.on("data", (d) => (this.output += d));
    child.stderr!.on("data", (d) => (this.output += d));
    this.exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
    await waitFor(
      `conveyor serve to answer on ${this.base}`,
      async () => {
        if (child.exitCode !== null) throw new Error(`conveyor serve exited ${child.exitCode}:\n${this.output}`);
        try {
          return (await fetch(`${this.base}/`)).ok;
        } catch {
          return false; // not listening yet
        }
      },
      20_000,
      () => this.output,
    );
  }

  /** SIGTERM; resolves with the exit code. */
  async stop(): Promise<number | null> {
    const child = this.child;
    if (!child || child.exitCode !== null) return child?.exitCode ?? null;
    child.kill("SIGTERM");
    return this.exited;
  }

  async dispose(): Promise<number | null> {
    const code = await this.stop();
    fs.rmSync(this.dir, { recursive: true, force: true });
    return code;
  }
}

/** A logger that keeps its lines (and shows them on failures). */
export class CapturingLogger implements Logger {
  readonly lines: string[] = [];
  info(m: string): void {
    this.lines.push(`info ${m}`);
  }
  warn(m: string): void {
    this.lines.push(`warn ${m}`);
  }
  error(m: string): void {
    this.lines.push(`error ${m}`);
  }
  count(re: RegExp): number {
    return this.lines.filter((l) => re.test(l)).length;
  }
  toString(): string {
    return this.lines.join("\n");
  }
}

export interface NewJob {
  queue: string;
  kind: string;
  payload?: string;
  maxAttempts?: number;
  key?: string;
}

/** Enqueues jobs (EnqueueBatch, 100 at a time); returns their ids. */
export async function enqueue(task: Clients["task"], jobs: NewJob[]): Promise<bigint[]> {
  const ids: bigint[] = [];
  for (let i = 0; i < jobs.length; i += 100) {
    const res = await task.enqueueBatch({ jobs: jobs.slice(i, i + 100) });
    ids.push(...res.ids);
  }
  return ids;
}

export async function getJob(task: Clients["task"], id: bigint) {
  const { job } = await task.getJob({ id });
  if (!job) throw new Error(`GetJob ${id}: no job in the answer`);
  return job;
}

export async function states(task: Clients["task"], ids: bigint[]): Promise<string[]> {
  const out: string[] = [];
  for (const id of ids) out.push((await getJob(task, id)).state);
  return out;
}
