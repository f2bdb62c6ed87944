// The dashboard end to end: a real `conveyor serve` (SQLite), the real CLI,
// and Debian's chromium driven by playwright-core. Builds nothing: it is given
// the conveyor binary (and optionally the plugin directory) to test.
//
//   CONVEYOR_BIN=build/bin/conveyor node --test --test-reporter=tap dashboard.test.mjs
//
// Options (environment, or --name=value when run as `node dashboard.test.mjs`):
//   CONVEYOR_BIN / --conveyor                   the conveyor binary (required)
//   CONVEYOR_PLUGIN_DIR / --plugin-dir          storage plugins (default: the binary's own)
//   CONVEYOR_CHROMIUM / --chromium              the browser (default /usr/bin/chromium)
//   CONVEYOR_DASHBOARD_ARTIFACTS / --artifacts  screenshots and server logs
//                                               (default ./dashboard-artifacts)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

function option(flag, envName) {
  const prefix = `--${flag}=`;
  const arg = process.argv.find((a) => a.startsWith(prefix));
  if (arg) return arg.slice(prefix.length);
  return process.env[envName] || undefined;
}

const conveyorBin = option('conveyor', 'CONVEYOR_BIN');
const pluginDir = option('plugin-dir', 'CONVEYOR_PLUGIN_DIR');
const chromiumPath = option('chromium', 'CONVEYOR_CHROMIUM') ?? '/usr/bin/chromium';
const artifacts = path.resolve(option('artifacts', 'CONVEYOR_DASHBOARD_ARTIFACTS') ?? 'dashboard-artifacts');
if (!conveyorBin) throw new Error('set CONVEYOR_BIN=/path/to/conveyor (or pass --conveyor=PATH)');
fs.mkdirSync(artifacts, { recursive: true });

const TOKEN = 'e2e-secret-token';

// ---- waiting -------------------------------------------------------------------

// Polls check() until it returns something truthy; fails after timeoutMs,
// saying what it waited for (a string, or a function giving one) and what it saw last.
async function waitFor(what, check, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (err) {
      if (err.fatal) throw err;
      last = err;
    }
    if (Date.now() > deadline) {
      const seen = last instanceof Error ? last.message : JSON.stringify(last);
      const described = typeof what === 'function' ? what() : what;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${described} (last seen: ${seen})`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// ---- conveyor as processes -------------------------------------------------------

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

function run(args, env = {}) {
  return new Promise((resolve) => {
    execFile(conveyorBin, args, { timeout: 30_000, env: { ...process.env, ...env } },
      (error, stdout, stderr) => resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr }));
  });
}

class Conveyor {
  // name: used for the temp dir and the log; server, engine: extra [server]
  // and [engine] lines; env: extra environment for serve and the CLI.
  static async start(name, { server, engine = [], env = {}, extra = [] }) {
    const c = new Conveyor();
    c.name = name;
    c.env = env;
    c.dir = fs.mkdtempSync(path.join(os.tmpdir(), `conveyor-dashboard-${name}-`));
    c.port = await freePort();
    c.base = `http://127.0.0.1:${c.port}`;
    c.config = path.join(c.dir, 'conveyor.toml');
    fs.writeFileSync(c.config, [
      '[storage]',
      'plugin = "sqlite"',
      pluginDir ? `plugin_dir = ${JSON.stringify(pluginDir)}` : '',
      '[storage.options]',
      `path = ${JSON.stringify(path.join(c.dir, 'conveyor.db'))}`,
      '[engine]',
      'poll_interval_ms = 200',
      'shutdown_timeout_ms = 500',
      ...engine,
      '[queues.reports]',
      'rate_limit = { rate = 4.0, burst = 2 }',
      '[server]',
      `listen = "127.0.0.1:${c.port}"`,
      ...server,
      ...extra,
      '',
    ].join('\n'));
    c.logPath = path.join(artifacts, `${name}-serve.log`);
    const log = fs.createWriteStream(c.logPath);
    c.proc = spawn(conveyorBin, ['--config', c.config, 'serve'], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    c.proc.stdout.pipe(log);
    c.proc.stderr.pipe(log);
    c.exited = new Promise((resolve) => c.proc.on('exit', (code, signal) => resolve({ code, signal })));
    await waitFor(`${name}: conveyor serve to answer GET / on ${c.base}`, async () => {
      if (c.proc.exitCode !== null) {
        const err = new Error(`conveyor serve exited with ${c.proc.exitCode}; see ${c.logPath}`);
        err.fatal = true;
        throw err;
      }
      const response = await fetch(`${c.base}/`);
      return response.ok;
    }, 20_000);
    return c;
  }

  async cli(...args) {
    const result = await run(['--config', this.config, ...args], this.env);
    if (result.code !== 0) {
      throw new Error(`conveyor ${args.join(' ')} exited ${result.code}: ${result.stderr.trim()}`);
    }
    return result.stdout;
  }

  // A call to the server's API as any client makes it (with this.token when set).
  async api(service, method, body = {}) {
    const headers = { 'Content-Type': 'application/json' };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const response = await fetch(`${this.base}/conveyor.v1.${service}/${method}`, {
      method: 'POST',
      headers,
      body: JSON.stringify(body),
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`${method} answered ${response.status}: ${text}`);
    return text === '' ? {} : JSON.parse(text);
  }

  admin(method, body) {
    return this.api('AdminService', method, body);
  }

  async rateLimits() {
    return JSON.parse(await this.cli('--json', 'ratelimit', 'ls'));
  }

  async stop() {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
      throw new Error(`${this.name}: conveyor serve had already exited with ${this.proc.exitCode ?? this.proc.signalCode}; see ${this.logPath}`);
    }
    this.proc.kill('SIGTERM');
    const timeout = new Promise((resolve) => setTimeout(() => resolve(null), 15_000));
    const exit = await Promise.race([this.exited, timeout]);
    if (exit === null) {
      this.proc.kill('SIGKILL');
      await this.exited;
      throw new Error(`${this.name}: conveyor serve did not stop within 15 s of SIGTERM; see ${this.logPath}`);
    }
    // A clean stop exits 0; anything else (a sanitizer report, a crash) fails the run.
    if (exit.code !== 0) {
      throw new Error(`${this.name}: conveyor serve exited with ${exit.code ?? exit.signal}; see ${this.logPath}`);
    }
  }
}

// ---- the browser ---------------------------------------------------------------------

let browser;  // a persistent context in a fresh --user-data-dir
let userDataDir;
const requests = [];
const pageErrors = [];

before(async () => {
  userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'conveyor-dashboard-chromium-'));
  browser = await chromium.launchPersistentContext(userDataDir, {
    executablePath: chromiumPath,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
    timeout: 30_000,
  });
  browser.on('request', (r) => requests.push({ url: r.url(), method: r.method(), headers: r.headers(), body: r.postData() }));
});

after(async () => {
  await browser?.close();
  if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
});

async function openPage(url, viewport) {
  const page = await browser.newPage();
  if (viewport) await page.setViewportSize(viewport);
  page.setDefaultTimeout(10_000);
  page.on('pageerror', (err) => pageErrors.push(`${url}: ${err.message}`));
  page.on('console', (msg) => {
    // The browser logs every non-2xx fetch; the tests provoke 401 and 404 on purpose.
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) {
      pageErrors.push(`${url}: console: ${msg.text()}`);
    }
  });
  await page.goto(url);
  return page;
}

async function screenshot(page, name) {
  const file = path.join(artifacts, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

// A table cell's text, or null while the row is not there.
function cell(page, table, queue, field) {
  return page.evaluate(([t, q, f]) => {
    const row = document.querySelector(`#${t}-table tbody tr[data-key="${CSS.escape(q)}"]`);
    const td = row?.querySelector(`td[data-field="${f}"]`);
    return td ? td.textContent.trim() : null;
  }, [table, queue, field]);
}

async function waitForCell(page, table, queue, field, expected, timeoutMs) {
  let seen;
  await waitFor(() => `${table} table: ${queue} ${field} = ${JSON.stringify(expected)}, it reads ${JSON.stringify(seen)}`,
    async () => {
      seen = await cell(page, table, queue, field);
      return seen === expected;
    }, timeoutMs);
}

async function waitForText(page, selector, expected) {
  let seen;
  await waitFor(() => `${selector} to read ${JSON.stringify(expected)}, it reads ${JSON.stringify(seen)}`,
    async () => {
      seen = await page.locator(selector).textContent();
      return seen === expected;
    });
}

async function rowKeys(page, table) {
  return page.evaluate((t) => [...document.querySelectorAll(`#${t}-table tbody tr`)].map((r) => r.dataset.key), table);
}

async function showTab(page, name) {
  await page.getByRole('tab', { name }).click();
  assert.equal(await page.getByRole('tab', { name }).getAttribute('aria-selected'), 'true');
  await page.locator(`#panel-${name.toLowerCase()}`).waitFor({ state: 'visible' });
}

function overrideOf(limits, queue) {
  return limits.overrides.find((o) => o.queue === queue);
}

// ---- an open server (allow_unauthenticated) --------------------------------------------------

describe('dashboard on a server without a token', () => {
  let conveyor;
  let page;

  before(async () => {
    conveyor = await Conveyor.start('open', {
      server: ['allow_unauthenticated = true'],
      extra: ['[http]', 'allow_hosts = ["127.0.0.1"]'],
    });
    // reports: throttled by its config limit (4/s) with a long backlog.
    await conveyor.cli('enqueue', 'reports', 'noop', '--count', '400');
    // bulk: unlimited, drains at once. email: running, scheduled and failed jobs.
    await conveyor.cli('enqueue', 'bulk', 'noop', '--count', '50');
    await conveyor.cli('enqueue', 'email', 'sleep', '--payload', '{"ms": 60000}', '--count', '2');
    await conveyor.cli('enqueue', 'email', 'noop', '--delay', '3600', '--count', '5');
    await conveyor.cli('enqueue', 'email', 'http', '--payload', '{"url": "http://127.0.0.2:9/"}', '--max-attempts', '1');
    page = await openPage(`${conveyor.base}/`);
  });

  after(async () => {
    await page?.close();
    await conveyor?.stop();
  });

  test('the Queues tab shows counts, the effective limit and its source, throttling and the chart', async () => {
    await showTab(page, 'Queues');
    await waitForCell(page, 'queues', 'reports', 'source', 'queue-config');
    assert.equal(await cell(page, 'queues', 'reports', 'limit'), '4/s · burst 2 · per process');
    await waitForCell(page, 'queues', 'bulk', 'source', 'none');
    assert.equal(await cell(page, 'queues', 'bulk', 'limit'), 'unlimited');
    await waitForCell(page, 'queues', 'bulk', 'pending', '0');
    await waitForCell(page, 'queues', 'email', 'running', '2');
    assert.equal(await cell(page, 'queues', 'email', 'scheduled'), '5');
    await waitForCell(page, 'queues', 'email', 'failed', '1');
    assert.deepEqual(await rowKeys(page, 'queues'), ['bulk', 'email', 'reports']);

    // The backlog waits its turn: pending stays high, the throttled counter climbs.
    await waitFor('reports to be throttled', async () => Number(await cell(page, 'queues', 'reports', 'throttled')) > 0);
    const pending = Number((await cell(page, 'queues', 'reports', 'pending')).replace(/,/g, ''));
    assert.ok(pending > 200 && pending < 400, `reports pending ${pending}: expected the 4/s limit to hold most back`);

    // The chart shows the throttled queue against its limit line, measured from the counters.
    assert.equal(await page.locator('#chart-queue').inputValue(), 'reports');
    await waitFor('a minute-chart with 6 measured points', () => page.evaluate(() => {
      const rate = document.querySelector('#chart path.rate');
      return rate && (rate.getAttribute('d').match(/L/g) ?? []).length >= 5;
    }), 20_000);
    assert.equal(await page.locator('#chart path.limit').count(), 1);
    assert.match(await page.locator('#chart .limit-label').textContent(), /^limit 4\/s$/);
    const summary = await page.locator('#chart-summary').textContent();
    assert.match(summary, /^reports: .* limit 4\/s \(queue-config\);/);
    const measured = parseFloat(await cell(page, 'queues', 'reports', 'rate'));
    assert.ok(measured > 1 && measured < 8, `measured ${measured}/s for a 4/s limit`);
    await screenshot(page, 'queues-tab');
  });

  test('a queue whose downstream answered 429 shows source backoff with the hold\'s end and why, and the operator ends it', async () => {
    // A downstream that always asks to wait ten minutes.
    let served = 0;
    const downstream = http.createServer((req, res) => {
      served += 1;
      res.writeHead(429, { 'Retry-After': '600' });
      res.end('slow down');
    });
    await new Promise((resolve) => downstream.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${downstream.address().port}/hook`;
      const before = Date.now();
      await conveyor.cli('enqueue', 'hooks', 'http', '--payload', JSON.stringify({ url }));
      await showTab(page, 'Queues');
      let text;
      await waitFor(() => `hooks source to read "backoff until ...", it reads ${JSON.stringify(text)}`, async () => {
        text = await cell(page, 'queues', 'hooks', 'source');
        return /^backoff until /.test(text ?? '');
      });
      const [, end, reason] = text.match(/^backoff until (.*? UTC)(.*)$/) ?? [];
      const until = Date.parse(end.replace(' UTC', 'Z').replace(' ', 'T'));
      assert.ok(until >= before + 590_000 && until <= Date.now() + 601_000,
        `the hold ends ${text}: expected about 600 s after the 429`);
      assert.equal(reason, 'HTTP 429: slow down', 'the cell says why the queue is held');
      await waitForCell(page, 'queues', 'hooks', 'pending', '1');  // waiting, its attempt given back
      // The operator ends the hold: the job is sent again at once (and held again).
      const hits = served;
      await page.getByRole('button', { name: 'End the hold of hooks' }).click();
      await waitFor(() => `a second request after ending the hold (served ${served})`, async () => served > hits);
    } finally {
      downstream.close();
    }
  });

  test('a bad rate shows the error and stores nothing', async () => {
    await showTab(page, 'Limits');
    const sets = () => requests.filter((r) => r.url.endsWith('/SetQueueRateLimit')).length;
    const before = sets();
    const queue = page.locator('#limit-queue');
    const rate = page.getByLabel('Rate (jobs/s)');
    const burst = page.getByLabel('Burst');

    await queue.fill('reports');
    await rate.fill('-1');
    await page.getByRole('button', { name: 'Save limit' }).click();
    assert.equal(await page.locator('#limit-rate-error').textContent(), 'rate must be a finite number greater than 0, got -1');
    assert.equal(await rate.getAttribute('aria-invalid'), 'true');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'limit-rate');

    // While typing, complaints come once typing pauses.
    await rate.fill('fast');
    await waitForText(page, '#limit-rate-error', 'rate must be a finite number greater than 0, got "fast"');
    await rate.fill('0');
    await waitForText(page, '#limit-rate-error', 'rate must be a finite number greater than 0, got 0');
    await burst.fill('2.5');
    await waitForText(page, '#limit-burst-error', 'burst must be a whole number from 1 to 4294967295, got "2.5"');
    await queue.fill('bad name!');
    await page.getByRole('button', { name: 'Save limit' }).click();
    assert.equal(await page.locator('#limit-queue-error').textContent(),
      'invalid queue name "bad name!": use 1-128 characters from A-Z a-z 0-9 . _ : - starting with a letter or digit');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'limit-queue');
    await screenshot(page, 'limits-error');

    assert.equal(sets(), before, 'no SetQueueRateLimit call may leave the browser');
    assert.deepEqual((await conveyor.rateLimits()).overrides, []);
    assert.deepEqual(await rowKeys(page, 'overrides'), []);

    // Fixing the input clears each error at once.
    await queue.fill('reports');
    assert.equal(await page.locator('#limit-queue-error').textContent(), '');
    await rate.fill('20');
    await burst.fill('5');
    assert.equal(await page.locator('#limit-queue-error').textContent(), '');
    assert.equal(await page.locator('#limit-rate-error').textContent(), '');
    assert.equal(await page.locator('#limit-burst-error').textContent(), '');
    assert.equal(await rate.getAttribute('aria-invalid'), null);
  });

  test('set a limit: it shows in the table, in `conveyor ratelimit ls` and as the source on the Queues tab', async () => {
    // The form still holds reports / 20 / 5 from the previous test.
    await page.getByRole('button', { name: 'Save limit' }).click();
    await page.locator('#limit-form-ok').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#limit-form-ok').textContent(), 'queue reports limited to 20/s (burst 5), per process');
    await waitForCell(page, 'overrides', 'reports', 'rate', '20');
    assert.equal(await cell(page, 'overrides', 'reports', 'burst'), '5');
    assert.match(await cell(page, 'overrides', 'reports', 'updated'), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    const stored = overrideOf(await conveyor.rateLimits(), 'reports');
    assert.equal(stored?.rate, 20);
    assert.equal(stored?.burst, 5);
    assert.equal(stored?.scope, 'process');  // the form's default
    assert.equal(await cell(page, 'overrides', 'reports', 'scope'), 'per process');

    // An empty burst is ceil(rate), as in `conveyor ratelimit set` without
    // --burst; this one fleet-wide.
    await page.locator('#limit-queue').fill('email');
    await page.getByLabel('Rate (jobs/s)').fill('2.5');
    await page.getByLabel('Scope').selectOption('fleet');
    await page.getByRole('button', { name: 'Save limit' }).click();
    await waitForCell(page, 'overrides', 'email', 'burst', '3');
    assert.equal(await cell(page, 'overrides', 'email', 'scope'), 'fleet-wide');
    assert.equal(await page.locator('#limit-form-ok').textContent(), 'queue email limited to 2.5/s (burst 3), fleet-wide');
    assert.equal(await page.getByLabel('Scope').inputValue(), 'process', 'the form resets to the default scope');
    assert.equal(overrideOf(await conveyor.rateLimits(), 'email')?.burst, 3);
    assert.equal(overrideOf(await conveyor.rateLimits(), 'email')?.scope, 'fleet');
    assert.deepEqual(await rowKeys(page, 'overrides'), ['email', 'reports']);
    assert.equal(await page.locator('#global-enabled').textContent(), 'enabled');
    assert.equal(await page.locator('#global-default').textContent(), 'none');
    await screenshot(page, 'limits-tab');

    await showTab(page, 'Queues');
    await waitForCell(page, 'queues', 'reports', 'source', 'override');
    assert.equal(await cell(page, 'queues', 'reports', 'limit'), '20/s · burst 5 · per process');
    assert.equal(await cell(page, 'queues', 'email', 'source'), 'override');
    assert.equal(await cell(page, 'queues', 'email', 'limit'), '2.5/s · burst 3 · fleet-wide');
  });

  test('edit a limit', async () => {
    await showTab(page, 'Limits');
    await page.getByRole('button', { name: 'Edit reports' }).click();
    assert.equal(await page.locator('#limit-form-title').textContent(), 'Edit limit of reports');
    assert.equal(await page.locator('#limit-queue').inputValue(), 'reports');
    assert.equal(await page.locator('#limit-queue').getAttribute('readonly'), '');
    assert.equal(await page.getByLabel('Rate (jobs/s)').inputValue(), '20');
    assert.equal(await page.getByLabel('Burst').inputValue(), '5');
    assert.equal(await page.getByLabel('Scope').inputValue(), 'process');
    await page.getByLabel('Rate (jobs/s)').fill('0.5');
    await page.getByLabel('Burst').fill('1');
    await page.getByRole('button', { name: 'Save limit' }).click();
    await waitForCell(page, 'overrides', 'reports', 'rate', '0.5');
    assert.equal(await cell(page, 'overrides', 'reports', 'burst'), '1');
    assert.equal(await page.locator('#limit-form-title').textContent(), 'Set a queue limit');
    assert.equal(await page.locator('#limit-queue').getAttribute('readonly'), null);
    const stored = overrideOf(await conveyor.rateLimits(), 'reports');
    assert.equal(stored?.rate, 0.5);
    assert.equal(stored?.burst, 1);
    await showTab(page, 'Queues');
    await waitForCell(page, 'queues', 'reports', 'limit', '0.5/s · burst 1 · per process');
  });

  test('remove a limit: the Queues tab shows the source fall back to the config file', async () => {
    await showTab(page, 'Limits');
    await page.getByRole('button', { name: 'Remove reports' }).click();
    const dialog = page.getByRole('dialog', { name: 'Remove override?' });
    await dialog.waitFor({ state: 'visible' });
    // Cancel keeps it.
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    assert.ok(overrideOf(await conveyor.rateLimits(), 'reports'), 'cancel must keep the override');
    await page.getByRole('button', { name: 'Remove reports' }).click();
    await dialog.getByRole('button', { name: 'Remove' }).click();
    await waitFor('the reports row to go', async () => (await rowKeys(page, 'overrides')).join() === 'email');
    assert.equal(overrideOf(await conveyor.rateLimits(), 'reports'), undefined);

    await showTab(page, 'Queues');
    await waitForCell(page, 'queues', 'reports', 'source', 'queue-config');
    assert.equal(await cell(page, 'queues', 'reports', 'limit'), '4/s · burst 2 · per process');
    // The chart keeps the story: the dashed limit steps 4 → 20 → 0.5 → 4.
    assert.equal(await page.locator('#chart-queue').inputValue(), 'reports');
    await waitFor('the limit line to show its steps', () => page.evaluate(() =>
      (document.querySelector('#chart path.limit')?.getAttribute('d').match(/L/g) ?? []).length >= 8));
    await screenshot(page, 'queues-tab-limit-changes');
  });

  test('changes made elsewhere show live; a removal the server rejects shows its message', async () => {
    await showTab(page, 'Limits');
    await conveyor.cli('ratelimit', 'set', 'bulk', '--rate', '7');
    await waitForCell(page, 'overrides', 'bulk', 'rate', '7');
    assert.equal(await cell(page, 'overrides', 'bulk', 'burst'), '7');

    // Another operator removes it while this one is confirming.
    await page.getByRole('button', { name: 'Remove bulk' }).click();
    const dialog = page.getByRole('dialog', { name: 'Remove override?' });
    await dialog.waitFor({ state: 'visible' });
    await conveyor.cli('ratelimit', 'rm', 'bulk');
    await dialog.getByRole('button', { name: 'Remove' }).click();
    const error = page.locator('#overrides-error');
    await error.waitFor({ state: 'visible' });
    const text = await error.textContent();
    assert.match(text, /^Could not remove the override of bulk: .*bulk/);
    await waitFor('the bulk row to go', async () => !(await rowKeys(page, 'overrides')).includes('bulk'));
    assert.equal(overrideOf(await conveyor.rateLimits(), 'bulk'), undefined);
  });

  test('pause and resume a queue from the Queues tab', async () => {
    await showTab(page, 'Queues');
    await page.getByRole('button', { name: 'Pause reports' }).click();
    await page.getByRole('button', { name: 'Resume reports' }).waitFor();
    assert.ok(await page.locator('#queues-table tr[data-key="reports"] .badge-paused').isVisible());
    await page.getByRole('button', { name: 'Resume reports' }).click();
    await page.getByRole('button', { name: 'Pause reports' }).waitFor();
    assert.ok(!(await page.locator('#queues-table tr[data-key="reports"] .badge-paused').isVisible()));
  });

  test('the kill switch: Cancel leaves it alone; Disable and Enable are stored and shown with their source', async () => {
    await showTab(page, 'Limits');
    const toggle = page.locator('#killswitch-toggle');
    const flips = () => requests.filter((r) => r.url.endsWith('/SetRateLimitingEnabled')).length;
    await waitForText(page, '#global-enabled', 'enabled');
    assert.match(await page.locator('#global-enabled-source').textContent(), /^config file: \[engine\] rate_limit_enabled/);
    assert.equal(await toggle.textContent(), 'Disable rate limiting');

    // Cancel: nothing is sent, nothing changes.
    const sent = flips();
    await toggle.click();
    const disable = page.getByRole('dialog', { name: 'Disable rate limiting?' });
    await disable.waitFor({ state: 'visible' });
    assert.match(await disable.textContent(), /every process on this storage/);
    await screenshot(page, 'killswitch-confirm');
    await disable.getByRole('button', { name: 'Cancel' }).click();
    await disable.waitFor({ state: 'hidden' });
    assert.equal(flips(), sent, 'a cancelled confirmation must not call SetRateLimitingEnabled');
    let limits = await conveyor.rateLimits();
    assert.equal(limits.enabled, true);
    assert.equal(limits.enabled_source, 'config');
    assert.equal(await page.locator('#global-enabled').textContent(), 'enabled');
    assert.ok(!(await page.locator('#killswitch-banner').isVisible()));

    // Disable: stored (the CLI, another process, reads it from storage), and shown.
    await toggle.click();
    await disable.getByRole('button', { name: 'Disable' }).click();
    await waitFor('the page to show rate limiting disabled', async () =>
      /^DISABLED/.test(await page.locator('#global-enabled').textContent()));
    assert.match(await page.locator('#global-enabled-source').textContent(), /^storage: /);
    assert.equal(await toggle.textContent(), 'Enable rate limiting');
    const banner = page.locator('#killswitch-banner');
    assert.ok(await banner.isVisible());
    assert.match(await banner.textContent(), /Rate limiting DISABLED.*stored: every process on this storage follows it/s);
    limits = await conveyor.rateLimits();
    assert.equal(limits.enabled, false);
    assert.equal(limits.enabled_source, 'storage');
    assert.ok(await page.locator('#overrides-ignored').isVisible(), 'overrides must be marked as not applied');
    await screenshot(page, 'killswitch-disabled');
    await showTab(page, 'Queues');
    await waitForCell(page, 'queues', 'reports', 'source', 'disabled');
    assert.equal(await cell(page, 'queues', 'reports', 'limit'), 'unlimited');

    // Enable: confirmed too, then every limit is back.
    await showTab(page, 'Limits');
    await toggle.click();
    const enable = page.getByRole('dialog', { name: 'Enable rate limiting?' });
    await enable.waitFor({ state: 'visible' });
    await enable.getByRole('button', { name: 'Enable' }).click();
    await waitForText(page, '#global-enabled', 'enabled');
    assert.match(await page.locator('#global-enabled-source').textContent(), /^storage: /);
    assert.equal(await toggle.textContent(), 'Disable rate limiting');
    await banner.waitFor({ state: 'hidden' });
    limits = await conveyor.rateLimits();
    assert.equal(limits.enabled, true);
    assert.equal(limits.enabled_source, 'storage');
    assert.equal(flips(), sent + 2);
    // Each flip names enabled explicitly, as a JSON boolean (the server
    // refuses {} and "false").
    const bodies = requests.filter((r) => r.url.endsWith('/SetRateLimitingEnabled')).slice(-2)
      .map((r) => JSON.parse(r.body));
    assert.deepEqual(bodies, [{ enabled: false }, { enabled: true }]);
    await showTab(page, 'Queues');
    await waitForCell(page, 'queues', 'reports', 'source', 'queue-config');
  });

  test('on a 390 px wide screen the tables stack and nothing scrolls sideways', async () => {
    const narrow = await openPage(`${conveyor.base}/#queues`, { width: 390, height: 844 });
    try {
      await waitForCell(narrow, 'queues', 'reports', 'source', 'queue-config');
      const layout = await narrow.evaluate(() => {
        const td = document.querySelector('#queues-table tr[data-key="reports"] td[data-field="pending"]');
        return {
          scrollWidth: document.documentElement.scrollWidth,
          headVisible: getComputedStyle(document.querySelector('#queues-table thead')).display !== 'none',
          label: getComputedStyle(td, '::before').content,
          rowDisplay: getComputedStyle(td.parentElement).display,
        };
      });
      assert.ok(layout.scrollWidth <= 390, `page is ${layout.scrollWidth} px wide on a 390 px screen`);
      assert.equal(layout.headVisible, false);
      assert.equal(layout.label, '"Pending"');
      assert.notEqual(layout.rowDisplay, 'table-row', 'each queue is a card, not a table row');
      assert.equal(await narrow.locator('#chart-queue').inputValue(), 'reports', 'the most throttled queue is charted');
      await waitFor('the narrow chart to draw the measured rate', () => narrow.evaluate(() =>
        (document.querySelector('#chart path.rate')?.getAttribute('d').match(/L/g) ?? []).length >= 2));
      assert.ok(await narrow.evaluate(() => document.documentElement.scrollWidth) <= 390);
      await screenshot(narrow, 'narrow-queues');

      await showTab(narrow, 'Limits');
      await narrow.getByRole('button', { name: 'Edit email' }).waitFor();
      assert.ok(await narrow.evaluate(() => document.documentElement.scrollWidth) <= 390);
      await screenshot(narrow, 'narrow-limits');
    } finally {
      await narrow.close();
    }
  });

  test('every request goes to the Conveyor server itself, and the page raised no error', () => {
    const elsewhere = requests.filter((r) => !r.url.startsWith(`${conveyor.base}/`));
    assert.deepEqual(elsewhere.map((r) => r.url), []);
    for (const asset of ['/', '/assets/app.css', '/assets/js/main.js', '/assets/favicon.svg']) {
      assert.ok(requests.some((r) => r.url === `${conveyor.base}${asset}`), `${asset} was not loaded`);
    }
    assert.deepEqual(pageErrors, []);
  });
});

// ---- the Jobs tab: list, filter, page, detail, retry, cancel, bulk retry -----------------------

describe('the Jobs tab on a server without a token', () => {
  let conveyor;
  let page;
  const ts = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/;

  // The API answers, read in the test (never through the page).
  const listQueue = async (queue) => (await conveyor.admin('ListQueues')).queues.find((q) => q.queue === queue);
  const apiPage = async ({ states = [], kind = '', afterId = '0' } = {}) => {
    const answer = await conveyor.admin('ListJobs', { queue: 'mail', states, kind, afterId, limit: 50 });
    return { ids: (answer.jobs ?? []).map((j) => String(j.id)), jobs: answer.jobs ?? [], next: String(answer.nextAfterId) };
  };
  const getJob = async (id) => (await conveyor.api('TaskService', 'GetJob', { id })).job;
  const shownIds = () => rowKeys(page, 'jobs');
  const fact = (name) => page.locator(`#job-facts dd[data-fact="${name}"]`).textContent();
  const waitForIds = async (expected, what) => {
    let seen;
    await waitFor(() => `the jobs table to show ${what} (${expected.length} rows from ${expected[0]}), it shows ${seen?.length} from ${seen?.[0]}`,
      async () => {
        seen = await shownIds();
        return seen.join() === expected.join();
      });
  };
  const jobRow = (id) => page.locator(`#jobs-table tbody tr[data-key="${id}"]`);

  before(async () => {
    requests.length = 0;
    // A kind no consumer serves is reported at once (no grace period).
    conveyor = await Conveyor.start('jobs', {
      server: ['allow_unauthenticated = true'],
      engine: ['unknown_kind_grace_s = 0'],
    });
    // mail: 250 jobs that fail at once (the address guard refuses loopback) and 5 that complete ...
    await conveyor.cli('enqueue', 'mail', 'http', '--payload', '{"url": "http://127.0.0.2:9/"}', '--count', '250');
    await conveyor.cli('enqueue', 'mail', 'noop', '--count', '5');
    await waitFor('mail: 250 failed and 5 completed', async () => {
      const q = await listQueue('mail');
      return q && Number(q.failed) === 250 && Number(q.completed) === 5;
    }, 30_000);
    // ... then paused, so retried jobs stay pending where the test can see them,
    // with 3 pending and 3 scheduled jobs.
    await conveyor.admin('PauseQueue', { queue: 'mail' });
    await conveyor.cli('enqueue', 'mail', 'noop', '--count', '3');
    await conveyor.cli('enqueue', 'mail', 'noop', '--delay', '3600', '--count', '3');
    // media: a kind no handler of this server serves.
    await conveyor.cli('enqueue', 'media', 'resize', '--count', '2');
    // slow: one job that runs for a minute, holding a lease.
    await conveyor.cli('enqueue', 'slow', 'sleep', '--payload', '{"ms": 60000}');
    page = await openPage(`${conveyor.base}/#queues`);
  });

  after(async () => {
    await page?.close();
    await conveyor?.stop();
  });

  test('the Queues tab shows Completed and Oldest pending; a queue\'s name opens its jobs', async () => {
    await waitForCell(page, 'queues', 'mail', 'completed', '5');
    assert.equal(await cell(page, 'queues', 'mail', 'failed'), '250');
    assert.equal(await cell(page, 'queues', 'mail', 'pending'), '3');
    assert.equal(await cell(page, 'queues', 'mail', 'scheduled'), '3');
    // The age of the oldest of the 3 pending jobs, held back by the pause, as the server tells it.
    const shown = await cell(page, 'queues', 'mail', 'oldest');
    const age = Number((await listQueue('mail')).oldestPendingAgeSeconds ?? 0);
    if (age > 0) {
      const seconds = Number(shown.match(/^(\d+) s$/)?.[1]);
      assert.ok(seconds <= age && seconds >= age - 3, `oldest pending reads ${shown}, the server says ${age} s`);
    } else {
      assert.equal(shown, '–');
    }

    // A warning line per queue with kinds no consumer serves, as the server reports them.
    await waitForText(page, '#unserved-warnings li[data-queue="media"]', 'media: no consumer serves kind resize (2 pending)');
    assert.deepEqual((await listQueue('media')).unservedKinds, [{ kind: 'resize', pending: '2' }]);
    assert.equal(await page.locator('#unserved-warnings li').count(), 1, 'only media has unserved jobs');

    await page.locator('#queues-table tr[data-key="mail"] a.queue-name').click();
    await page.locator('#panel-jobs').waitFor({ state: 'visible' });
    assert.equal(new URL(page.url()).hash, '#jobs/mail');
    assert.equal(await page.getByRole('tab', { name: 'Jobs' }).getAttribute('aria-selected'), 'true');
    assert.equal(await page.locator('#jobs-title').textContent(), 'Jobs of mail');
    const first = await apiPage();
    assert.equal(first.ids.length, 50);
    await waitForIds(first.ids, 'the first page of all jobs');
    await waitForText(page, '#jobs-page', 'Page 1 of 6 · 261 jobs');
    // Each row: id, kind, state, attempt/max, run_at, last error.
    const [job] = first.jobs;
    const row = jobRow(job.id);
    assert.equal(await row.locator('td[data-field="kind"]').textContent(), 'http');
    assert.equal(await row.locator('td[data-field="state"]').textContent(), 'failed');
    assert.equal(await row.locator('td[data-field="attempt"]').textContent(), `1/${job.maxAttempts}`);
    assert.match(await row.locator('td[data-field="run_at"]').textContent(), ts);
    assert.match(await row.locator('td[data-field="last_error"]').textContent(), /^target 127\.0\.0\.2 is a loopback address; /);

    // Back returns to the Queues tab, forward to the jobs.
    await page.goBack();
    await page.locator('#panel-queues').waitFor({ state: 'visible' });
    assert.equal(await page.getByRole('tab', { name: 'Queues' }).getAttribute('aria-selected'), 'true');
    await page.goForward();
    await page.locator('#panel-jobs').waitFor({ state: 'visible' });
    await waitForIds(first.ids, 'the first page again');
  });

  test('filter by state and kind; Next and Previous follow the server\'s cursors', async () => {
    await page.locator('#jobs-state').selectOption('failed');
    assert.equal(new URL(page.url()).hash, '#jobs/mail?state=failed');
    const p1 = await apiPage({ states: ['failed'] });
    await waitForIds(p1.ids, 'failed page 1');
    await waitForText(page, '#jobs-page', 'Page 1 of 5 · 250 failed jobs');
    assert.equal(await page.locator('#jobs-prev').isDisabled(), true);
    const p2 = await apiPage({ states: ['failed'], afterId: p1.next });
    const p3 = await apiPage({ states: ['failed'], afterId: p2.next });
    assert.ok(Number(p2.ids[0]) > Number(p1.ids.at(-1)) && Number(p3.ids[0]) > Number(p2.ids.at(-1)));
    await page.locator('#jobs-next').click();
    await waitForIds(p2.ids, 'failed page 2');
    await waitForText(page, '#jobs-page', 'Page 2 of 5 · 250 failed jobs');
    await page.locator('#jobs-next').click();
    await waitForIds(p3.ids, 'failed page 3');
    await page.locator('#jobs-prev').click();
    await waitForIds(p2.ids, 'failed page 2 after Previous');
    await page.locator('#jobs-prev').click();
    await waitForIds(p1.ids, 'failed page 1 after Previous');
    assert.equal(await page.locator('#jobs-prev').isDisabled(), true);
    await screenshot(page, 'jobs-view');

    // Kind: failed noop jobs there are none; noop jobs of every state fit one page.
    await page.locator('#jobs-kind').fill('noop');
    await page.locator('#jobs-kind').press('Enter');
    await page.locator('#jobs-empty').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#jobs-empty').textContent(), 'No failed jobs of kind noop in queue mail.');
    assert.equal(new URL(page.url()).hash, '#jobs/mail?state=failed&kind=noop');
    await page.locator('#jobs-state').selectOption('');
    const noop = await apiPage({ kind: 'noop' });
    assert.equal(noop.ids.length, 11);
    assert.equal(noop.next, '0');
    await waitForIds(noop.ids, 'the noop jobs');
    assert.equal(await page.locator('#jobs-next').isDisabled(), true);
    assert.deepEqual(await page.locator('#jobs-table td[data-field="kind"]').allTextContents(), Array(11).fill('noop'));
    await page.locator('#jobs-kind').fill('');
    await page.locator('#jobs-kind').press('Enter');
    await page.locator('#jobs-state').selectOption('failed');
    await waitForIds(p1.ids, 'failed page 1 without the kind');
  });

  test('a job\'s detail; Retry asks first, then the job leaves the failed list', async () => {
    const [job] = (await apiPage({ states: ['failed'] })).jobs;
    const id = String(job.id);
    await jobRow(id).locator('td[data-field="kind"]').click();
    const card = page.locator('#job-detail');
    await card.waitFor({ state: 'visible' });
    assert.equal(new URL(page.url()).hash, `#jobs/mail?state=failed&job=${id}`);
    await waitFor('the detail to load', async () => (await fact('state')) === 'failed');
    assert.equal(await page.locator('#job-detail-title').textContent(), `Job ${id}`);
    assert.equal(await fact('queue'), 'mail');
    assert.equal(await fact('kind'), 'http');
    assert.equal(await fact('attempts'), `1 of ${job.maxAttempts}`);
    assert.match(await fact('created'), ts);
    assert.match(await fact('run-at'), ts);
    assert.match(await fact('finalized'), ts);
    assert.equal(await fact('lease-expires'), '–');
    assert.equal(await page.locator('#job-payload').textContent(), '{\n  "url": "http://127.0.0.2:9/"\n}');
    assert.match(await page.locator('#job-last-error').textContent(), /^target 127\.0\.0\.2 is a loopback address; /);
    assert.ok(await page.locator('#job-retry').isVisible());
    assert.equal(await page.locator('#job-cancel').isVisible(), false, 'a failed job cannot be cancelled');
    assert.ok(await jobRow(id).evaluate((r) => r.classList.contains('selected')));
    await screenshot(page, 'job-detail');

    // Cancel in the dialog keeps it failed.
    await page.getByRole('button', { name: `Retry job ${id}` }).click();
    const dialog = page.getByRole('dialog', { name: `Retry job ${id}?` });
    await dialog.waitFor({ state: 'visible' });
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden' });
    assert.equal((await getJob(id)).state, 'failed');

    await page.getByRole('button', { name: `Retry job ${id}` }).click();
    await dialog.getByRole('button', { name: 'Retry' }).click();
    await waitForText(page, '#job-ok', `Job ${id} was retried: it is pending again.`);
    const retried = await getJob(id);
    assert.equal(retried.state, 'available');
    assert.equal(Number(retried.attempt), 0);
    await waitFor('the state to read pending', async () => (await fact('state')) === 'pending');
    assert.equal(await fact('attempts'), `0 of ${job.maxAttempts}`);
    await waitFor('the retried job to leave the failed list', async () => !(await shownIds()).includes(id));
    assert.deepEqual(await shownIds(), (await apiPage({ states: ['failed'] })).ids);

    // Close goes back to the list it came from.
    await page.locator('#job-close').click();
    await card.waitFor({ state: 'hidden' });
    assert.equal(new URL(page.url()).hash, '#jobs/mail?state=failed');
  });

  test('a retry another operator already made shows the server\'s outcome', async () => {
    const [job] = (await apiPage({ states: ['failed'] })).jobs;
    const id = String(job.id);
    await jobRow(id).locator('td[data-field="kind"]').click();
    await page.getByRole('button', { name: `Retry job ${id}` }).click();
    const dialog = page.getByRole('dialog', { name: `Retry job ${id}?` });
    await dialog.waitFor({ state: 'visible' });
    const elsewhere = await conveyor.admin('RetryJobs', { ids: [id] });
    assert.deepEqual(elsewhere.outcomes.map((o) => o.outcome), ['ok']);
    await dialog.getByRole('button', { name: 'Retry' }).click();
    await waitForText(page, '#job-error',
      `Job ${id} was not retried: wrong_state: only failed or cancelled jobs can be retried`);
    assert.equal((await getJob(id)).state, 'available');
    await page.locator('#job-close').click();
  });

  test('cancel a scheduled and a pending job; cancelling a job already final shows the server\'s error', async () => {
    await page.locator('#jobs-state').selectOption('scheduled');
    const scheduled = await apiPage({ states: ['scheduled'] });
    assert.equal(scheduled.ids.length, 3);
    await waitForIds(scheduled.ids, 'the scheduled jobs');
    const sid = scheduled.ids[0];
    await jobRow(sid).locator('td[data-field="kind"]').click();
    await waitFor('the detail to load', async () => (await fact('state')) === 'scheduled');
    assert.equal(await page.locator('#job-retry').isVisible(), false, 'a scheduled job cannot be retried');
    await page.getByRole('button', { name: `Cancel job ${sid}` }).click();
    const dialog = page.getByRole('dialog', { name: `Cancel job ${sid}?` });
    await dialog.waitFor({ state: 'visible' });
    await dialog.getByRole('button', { name: 'Cancel job' }).click();
    await waitForText(page, '#job-ok', `Job ${sid} was cancelled.`);
    assert.equal((await getJob(sid)).state, 'cancelled');
    await waitFor('the state to read cancelled', async () => (await fact('state')) === 'cancelled');
    assert.equal(await page.locator('#job-cancel').isVisible(), false);
    assert.ok(await page.locator('#job-retry').isVisible(), 'a cancelled job can be retried');
    assert.match(await fact('finalized'), ts);
    await waitFor('the cancelled job to leave the scheduled list', async () => !(await shownIds()).includes(sid));
    await page.locator('#job-close').click();

    // A pending job, cancelled by someone else while this operator confirms.
    await page.locator('#jobs-state').selectOption('available');
    const pending = await apiPage({ states: ['available'], kind: 'noop' });
    const pid = pending.ids[0];
    await jobRow(pid).locator('td[data-field="kind"]').click();
    await waitFor('the detail to load', async () => (await fact('state')) === 'pending');
    await page.getByRole('button', { name: `Cancel job ${pid}` }).click();
    const pdialog = page.getByRole('dialog', { name: `Cancel job ${pid}?` });
    await pdialog.waitFor({ state: 'visible' });
    // "Keep job" changes nothing.
    await pdialog.getByRole('button', { name: 'Keep job' }).click();
    assert.equal((await getJob(pid)).state, 'available');
    await page.getByRole('button', { name: `Cancel job ${pid}` }).click();
    await pdialog.waitFor({ state: 'visible' });
    await conveyor.admin('CancelJob', { id: pid });
    await pdialog.getByRole('button', { name: 'Cancel job' }).click();
    const error = page.locator('#job-error');
    await error.waitFor({ state: 'visible' });
    assert.match(await error.textContent(), new RegExp(`^Could not cancel job ${pid}: .+ \\(failed_precondition\\)$`));
    assert.equal((await getJob(pid)).state, 'cancelled');
    await page.locator('#job-close').click();
  });

  test('Retry all failed: confirmed, in batches, with progress and the total', async () => {
    await page.locator('#jobs-state').selectOption('failed');
    const failedBefore = Number((await listQueue('mail')).failed);
    assert.equal(failedBefore, 248);
    await waitForText(page, '#jobs-retry-all', 'Retry all 248 failed');
    const calls = () => requests.filter((r) => r.url.endsWith('/RetryJobs')).length;
    const callsBefore = calls();
    await page.locator('#jobs-retry-all').click();
    const dialog = page.getByRole('dialog', { name: 'Retry all failed jobs of mail?' });
    await dialog.waitFor({ state: 'visible' });
    assert.match(await page.locator('#confirm-text').textContent(), /^All 248 failed jobs of mail become available/);
    await dialog.getByRole('button', { name: 'Retry all' }).click();
    const status = page.locator('#jobs-bulk-status');
    let text;
    await waitFor(() => `the bulk retry to finish (status: ${text})`, async () => {
      text = await status.textContent();
      return text.startsWith('Retried ');
    });
    const match = text.match(/^Retried 248 failed jobs of mail in (\d+) batches\.$/);
    assert.ok(match, `status reads ${JSON.stringify(text)}`);
    const batches = Number(match[1]);
    assert.ok(batches >= 2, `248 jobs in batches of 200 take at least 2 calls, took ${batches}`);
    assert.equal(calls() - callsBefore, batches, 'one RetryJobs call per batch');
    assert.equal(await page.locator('#jobs-bulk-error').isVisible(), false);

    const after = await listQueue('mail');
    assert.equal(Number(after.failed), 0);
    assert.equal((await apiPage({ states: ['failed'] })).ids.length, 0);
    // 3 pending noop - 1 cancelled + 2 retried one by one + 248 in bulk.
    assert.equal(Number(after.pending), 252);
    await page.locator('#jobs-empty').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#jobs-empty').textContent(), 'No failed jobs in queue mail.');
    await waitForText(page, '#jobs-retry-all', 'Retry all failed');
    assert.equal(await page.locator('#jobs-retry-all').isDisabled(), true);
    await screenshot(page, 'jobs-bulk-retried');
  });

  test('another queue from the Jobs tab\'s own list: a running job shows its lease expiry', async () => {
    await page.locator('#jobs-queue').selectOption('slow');
    await page.locator('#jobs-state').selectOption('running');
    assert.equal(new URL(page.url()).hash, '#jobs/slow?state=running');
    let running;
    await waitFor('the slow job to run', async () => {
      [running] = (await conveyor.admin('ListJobs', { queue: 'slow', states: ['running'] })).jobs ?? [];
      return running;
    });
    await jobRow(running.id).locator('td[data-field="kind"]').click();
    await waitFor('the detail to load', async () => (await fact('state')) === 'running');
    assert.equal(await fact('attempts'), `1 of ${running.maxAttempts}`);
    assert.match(await fact('lease-expires'), ts);
    assert.ok(running.leaseExpiresAt !== '', 'the API reports the lease');
    // The lease is extended while the job runs: the shown expiry is the API's, give or take renewals.
    const shownLease = Date.parse((await fact('lease-expires')).replace(' UTC', 'Z').replace(' ', 'T'));
    assert.ok(Math.abs(shownLease - Date.parse(running.leaseExpiresAt)) < 60_000,
      `lease shown ${await fact('lease-expires')}, the API says ${running.leaseExpiresAt}`);
    assert.ok(shownLease > Date.now() - 2_000, 'a running job\'s lease has not expired');
    assert.equal(await fact('finalized'), '–');
    assert.ok(await page.locator('#job-cancel').isVisible());
    assert.equal(await page.locator('#job-retry').isVisible(), false);
    await page.locator('#job-close').click();
    await page.locator('#jobs-queue').selectOption('mail');
  });

  test('a job\'s key: a Key column while a job of the page has one, and in the detail', async () => {
    const longKey = 'k'.repeat(200);
    await conveyor.cli('enqueue', 'tenants', 'noop', '--delay', '3600', '--key', 'tenant-42');
    await conveyor.cli('enqueue', 'tenants', 'noop', '--delay', '3600');
    await conveyor.cli('enqueue', 'tenants', 'noop', '--delay', '3600', '--key', longKey);
    const jobs = (await conveyor.admin('ListJobs', { queue: 'tenants' })).jobs;
    assert.deepEqual(jobs.map((j) => j.key), ['tenant-42', '', longKey]);
    const [keyed, plain, long] = jobs.map((j) => String(j.id));
    const wide = await openPage(`${conveyor.base}/#jobs/tenants`);
    try {
      const keyOf = (id) => wide.locator(`#jobs-table tbody tr[data-key="${id}"] td[data-field="key"]`);
      await keyOf(long).waitFor();
      assert.ok(await wide.locator('#jobs-table th.key-col').isVisible(), 'the Key column shows');
      assert.equal(await keyOf(keyed).textContent(), 'tenant-42');
      assert.equal(await keyOf(plain).textContent(), '–');
      assert.equal(await keyOf(long).textContent(), `${'k'.repeat(39)}…`);
      assert.equal(await keyOf(long).getAttribute('title'), longKey);
      await keyOf(keyed).click();
      await wide.locator('#job-detail').waitFor({ state: 'visible' });
      const factOf = (name) => wide.locator(`#job-facts dd[data-fact="${name}"]`).textContent();
      await waitFor('the keyed detail', async () => (await factOf('key')) === 'tenant-42');
      await wide.locator('#job-close').click();
      await wide.goto(`${conveyor.base}/#jobs/tenants?job=${plain}`);
      await waitFor('the detail of the job with the empty key', async () =>
        (await factOf('key')) === 'none (the empty key)');
      // A queue whose jobs have no key: no Key column.
      await wide.locator('#jobs-queue').selectOption('slow');
      await wide.locator('#jobs-table tbody tr').first().waitFor();
      assert.equal(await wide.locator('#jobs-table th.key-col').isVisible(), false);
      assert.equal(await wide.locator('#jobs-table td[data-field="key"]').first().isVisible(), false);
    } finally {
      await wide.close();
    }
    // The longest key on a 390 px screen: nothing scrolls sideways, in the cards or the detail.
    const narrow = await openPage(`${conveyor.base}/#jobs/tenants?job=${long}`, { width: 390, height: 844 });
    try {
      await waitFor('the long key\'s detail', async () =>
        (await narrow.locator('#job-facts dd[data-fact="key"]').textContent()) === longKey);
      assert.ok(await narrow.evaluate(() => document.documentElement.scrollWidth) <= 390);
      await screenshot(narrow, 'narrow-job-key');
    } finally {
      await narrow.close();
    }
  });

  test('a job\'s link opens its detail directly; on a 390 px screen nothing scrolls sideways', async () => {
    const [job] = (await apiPage({ states: ['available'] })).jobs;
    const narrow = await openPage(`${conveyor.base}/#jobs/mail?state=available&job=${job.id}`, { width: 390, height: 844 });
    try {
      await narrow.locator('#job-detail').waitFor({ state: 'visible' });
      await waitFor('the linked detail to load', async () =>
        (await narrow.locator('#job-facts dd[data-fact="state"]').textContent()) === 'pending');
      assert.equal(await narrow.locator('#job-detail-title').textContent(), `Job ${job.id}`);
      await narrow.locator(`#jobs-table tbody tr[data-key="${job.id}"]`).waitFor();
      assert.ok(await narrow.evaluate(() => document.documentElement.scrollWidth) <= 390);
      await screenshot(narrow, 'narrow-jobs');
    } finally {
      await narrow.close();
    }
    assert.deepEqual(pageErrors, []);
  });
});

// ---- the Keys card (issue 36) ------------------------------------------------------------------

describe('the Keys card of a keyed queue', () => {
  let conveyor;
  let page;

  before(async () => {
    requests.length = 0;
    // Each key's bucket starts one job, then its other jobs wait throttled.
    conveyor = await Conveyor.start('keys', {
      server: ['allow_unauthenticated = true'],
      extra: ['[queues.tenants]', 'key_rate_limit = { rate = 0.01, burst = 1 }'],
    });
    const long = ['sleep', '--payload', '{"ms": 60000}'];
    await conveyor.cli('enqueue', 'tenants', ...long, '--key', 'a', '--count', '3');   // ids 1..3
    await conveyor.cli('enqueue', 'tenants', ...long, '--key', 'b', '--count', '5');   // ids 4..8
    await conveyor.cli('enqueue', 'tenants', ...long, '--key', 'c');                   // id 9
    page = await openPage(`${conveyor.base}/#jobs/tenants`);
  });

  after(async () => {
    await page?.close();
    await conveyor?.stop();
  });

  test('busiest keys first with ready, running and throttled; the per-key limit and its source', async () => {
    await page.locator('#keys-card').waitFor({ state: 'visible' });
    // Each key runs one job; a and b then wait throttled, c has nothing left.
    await waitForCell(page, 'keys', 'k:b', 'throttled', 'yes', 20_000);
    await waitForCell(page, 'keys', 'k:a', 'throttled', 'yes', 20_000);
    await waitForCell(page, 'keys', 'k:c', 'running', '1', 20_000);
    assert.deepEqual(await rowKeys(page, 'keys'), ['k:b', 'k:a', 'k:c']);
    const row = async (key) => Promise.all(['key', 'ready', 'running', 'throttled'].map((f) => cell(page, 'keys', key, f)));
    assert.deepEqual(await row('k:b'), ['b', '4', '1', 'yes']);
    assert.deepEqual(await row('k:a'), ['a', '2', '1', 'yes']);
    assert.deepEqual(await row('k:c'), ['c', '0', '1', 'no']);
    // Each key's limit (key_rate_limit here), its source and its weight.
    const settings = async (key) => Promise.all(['limit', 'source', 'weight'].map((f) => cell(page, 'keys', key, f)));
    for (const key of ['k:a', 'k:b', 'k:c']) {
      assert.deepEqual(await settings(key), ['0.01/s · burst 1 · per process', 'queue-config', '1']);
    }
    // The same as the API says.
    const answer = await conveyor.admin('ListKeys', { queue: 'tenants' });
    assert.deepEqual(answer.keys.map((k) => [k.key, k.ready ?? '0', k.running ?? '0', k.throttled ?? false,
      k.limitSource, k.weight]),
    [['b', '4', '1', true, 'queue-config', 1], ['a', '2', '1', true, 'queue-config', 1],
      ['c', '0', '1', false, 'queue-config', 1]]);
    assert.equal(await page.locator('#keys-title').textContent(), 'Keys of tenants');
    assert.match(await page.locator('#keys-limit').textContent(),
      /^Key limit: 0\.01\/s · burst 1 per key \(source: queue-config\); fairness: fair\.$/);
    // A queue without keys has no Keys card.
    await conveyor.cli('enqueue', 'plain', 'noop', '--delay', '3600');
    await page.goto(`${conveyor.base}/#jobs/plain`);
    await page.locator('#jobs-table tbody tr').first().waitFor();
    await waitFor('the Keys card to hide', async () => !(await page.locator('#keys-card').isVisible()));
  });

  test('a key\'s own limit, every key\'s and a weight, set by another process, show in the card', async () => {
    await page.goto(`${conveyor.base}/#jobs/tenants`);
    await waitForCell(page, 'keys', 'k:a', 'source', 'queue-config');
    // The CLI on the storage itself: the server follows within a second,
    // the card at its next poll.
    await conveyor.cli('ratelimit', 'set', 'tenants', '--key', 'a', '--rate', '0.02', '--burst', '1');
    await waitForCell(page, 'keys', 'k:a', 'source', 'override', 20_000);
    assert.equal(await cell(page, 'keys', 'k:a', 'limit'), '0.02/s · burst 1 · per process');
    await conveyor.cli('ratelimit', 'set', 'tenants', '--per-key', '--rate', '0.05', '--burst', '1', '--scope', 'fleet');
    await waitForCell(page, 'keys', 'k:b', 'source', 'per-key-override', 20_000);
    assert.equal(await cell(page, 'keys', 'k:b', 'limit'), '0.05/s · burst 1 · fleet-wide');
    assert.equal(await cell(page, 'keys', 'k:a', 'source'), 'override');  // a key's own wins
    await waitForText(page, '#keys-limit', 'Key limit: 0.05/s · burst 1 per key · fleet-wide (source: per-key-override); fairness: fair.');
    await conveyor.cli('keys', 'weight', 'tenants', 'b', '3');
    await waitForCell(page, 'keys', 'k:b', 'weight', '3', 20_000);
    assert.equal(await cell(page, 'keys', 'k:a', 'weight'), '1');
    // The API says the same.
    const answer = await conveyor.admin('ListKeys', { queue: 'tenants' });
    const byKey = Object.fromEntries(answer.keys.map((k) => [k.key, [k.limitSource, k.weight, k.limit?.ratePerSec]]));
    assert.deepEqual(byKey.a, ['override', 1, 0.02]);
    assert.deepEqual(byKey.b, ['per-key-override', 3, 0.05]);
    await screenshot(page, 'keys-card-settings');
    // The Limits tab lists every stored key setting, in the API's order.
    await showTab(page, 'Limits');
    await waitForCell(page, 'key-settings', 'q:tenants\nk:b', 'weight', '3', 20_000);
    const stored = (await conveyor.admin('ListRateLimits', {})).keySettings;
    assert.deepEqual(await rowKeys(page, 'key-settings'),
      stored.map((k) => `q:${k.queue}\n${k.key === undefined ? '*' : `k:${k.key}`}`));
    const setting = async (key) => Promise.all(['queue', 'key', 'limit', 'weight'].map((f) => cell(page, 'key-settings', key, f)));
    assert.deepEqual(await setting('q:tenants\nk:a'), ['tenants', 'a', '0.02/s · burst 1 · per process', '—']);
    assert.deepEqual(await setting('q:tenants\nk:b'), ['tenants', 'b', '—', '3']);
    assert.deepEqual(await setting('q:tenants\n*'), ['tenants', 'every key', '0.05/s · burst 1 · fleet-wide', '—']);
    assert.equal(await page.locator('#key-settings-empty').isVisible(), false);
    await screenshot(page, 'limits-key-settings');
    await page.goto(`${conveyor.base}/#jobs/tenants`);
    // Removed: back to key_rate_limit and weight 1.
    await conveyor.cli('ratelimit', 'rm', 'tenants', '--key', 'a');
    await conveyor.cli('ratelimit', 'rm', 'tenants', '--per-key');
    await conveyor.cli('keys', 'weight', 'tenants', 'b', '--reset');
    await waitForCell(page, 'keys', 'k:a', 'source', 'queue-config', 20_000);
    await waitForCell(page, 'keys', 'k:b', 'source', 'queue-config', 20_000);
    await waitForCell(page, 'keys', 'k:b', 'weight', '1', 20_000);
    await showTab(page, 'Limits');
    await page.locator('#key-settings-empty').waitFor({ state: 'visible', timeout: 20_000 });
    assert.deepEqual(await rowKeys(page, 'key-settings'), []);
    assert.deepEqual(pageErrors, []);
  });

  test('a key\'s name shows its jobs (filtered in the browser); "Every key\'s jobs" shows them all', async () => {
    await page.goto(`${conveyor.base}/#jobs/tenants`);
    await waitForCell(page, 'keys', 'k:a', 'key', 'a');
    await waitFor('every job listed', async () => (await rowKeys(page, 'jobs')).length === 9);
    await page.locator('#keys-table tbody tr[data-key="k:a"] button.key-link').click();
    await waitFor('only key a\'s jobs', async () => (await rowKeys(page, 'jobs')).join() === '1,2,3');
    assert.match(page.url(), /#jobs\/tenants\?key=a$/);
    assert.equal(await page.locator('#jobs-title').textContent(), 'Jobs of tenants, key a');
    assert.match(await page.locator('#jobs-page').textContent(), /filtered in the browser/);
    assert.ok(await page.locator('#keys-table tbody tr[data-key="k:a"]').evaluate((r) => r.classList.contains('selected')));
    // The link is shareable: opened afresh it shows the same.
    const linked = await openPage(`${conveyor.base}/#jobs/tenants?key=b`);
    try {
      await waitFor('only key b\'s jobs', async () => (await rowKeys(linked, 'jobs')).join() === '4,5,6,7,8');
    } finally {
      await linked.close();
    }
    await page.locator('#keys-clear').click();
    await waitFor('every job again', async () => (await rowKeys(page, 'jobs')).length === 9);
    assert.match(page.url(), /#jobs\/tenants$/);
    assert.equal(await page.locator('#keys-clear').isVisible(), false);
    await screenshot(page, 'keys-card');
    assert.deepEqual(pageErrors, []);
    for (const r of requests) assert.ok(r.url.startsWith(conveyor.base), r.url);
  });
});

// ---- a server with an admin token and the kill switch off -------------------------------------

describe('dashboard on a read-only server with an admin token, a global default and rate limiting disabled', () => {
  let conveyor;

  before(async () => {
    requests.length = 0;
    conveyor = await Conveyor.start('token', {
      server: [`admin_token = "${TOKEN}"`, 'read_only = true'],
      env: { CONVEYOR_RATE_LIMIT_ENABLED: 'false', CONVEYOR_RATE_LIMIT_RATE_PER_SEC: '2' },
    });
    await conveyor.cli('enqueue', 'reports', 'noop', '--count', '20');
    await conveyor.cli('ratelimit', 'set', 'email', '--rate', '3', '--burst', '2');
    conveyor.token = TOKEN;
    // One job that fails at once, for the Jobs tab's refused retry.
    await conveyor.cli('enqueue', 'broken', 'http', '--payload', '{"url": "http://127.0.0.2:9/"}');
    await waitFor('the broken job to fail', async () =>
      Number((await conveyor.admin('ListQueues')).queues.find((q) => q.queue === 'broken')?.failed) === 1);
  });

  after(async () => {
    await conveyor?.stop();
  });

  test('asks for the token once per browser session and sends it on every call', async () => {
    const page = await openPage(`${conveyor.base}/`);
    try {
      const dialog = page.getByRole('dialog', { name: 'Admin token' });
      await dialog.waitFor({ state: 'visible' });
      await dialog.getByLabel('Token').fill('wrong-token');
      await dialog.getByRole('button', { name: 'Continue' }).click();
      await waitFor('the wrong token to be rejected', async () =>
        /^The server rejected that token: /.test(await page.locator('#token-error').textContent()));
      assert.ok(await dialog.isVisible());
      await screenshot(page, 'token-prompt');

      await dialog.getByLabel('Token').fill(TOKEN);
      await dialog.getByRole('button', { name: 'Continue' }).click();
      await dialog.waitFor({ state: 'hidden' });
      await waitForCell(page, 'queues', 'reports', 'source', 'disabled');
      assert.equal(await cell(page, 'queues', 'reports', 'limit'), 'unlimited');
      const calls = requests.filter((r) => r.url.endsWith('/ListQueues'));
      assert.equal(calls.at(-1).headers.authorization, `Bearer ${TOKEN}`);

      // A reload in the same tab keeps the token: no second prompt.
      await page.reload();
      await waitForCell(page, 'queues', 'reports', 'source', 'disabled');
      assert.equal(await dialog.isVisible(), false);
    } finally {
      await page.close();
    }
    // A new tab is a new session: it asks again.
    const fresh = await openPage(`${conveyor.base}/`);
    try {
      await fresh.getByRole('dialog', { name: 'Admin token' }).waitFor({ state: 'visible' });
    } finally {
      await fresh.close();
    }
  });

  test('the kill switch shows as "rate limiting DISABLED", overrides kept; a refused change shows the server\'s message', async () => {
    const page = await openPage(`${conveyor.base}/#limits`);
    try {
      await page.evaluate((t) => sessionStorage.setItem('conveyor.adminToken', t), TOKEN);
      await page.reload();
      const banner = page.locator('#killswitch-banner');
      await banner.waitFor({ state: 'visible' });
      assert.match(await banner.textContent(), /Rate limiting DISABLED/);
      await waitForCell(page, 'overrides', 'email', 'rate', '3');
      assert.match(await page.locator('#global-enabled').textContent(), /^DISABLED/);
      assert.match(await page.locator('#global-enabled-source').textContent(), /^config file: /);
      assert.match(await banner.textContent(), /rate_limit_enabled = false in the config file/);
      assert.equal(await page.locator('#global-default').textContent(), '2/s · burst 2 · per process');
      assert.ok(await page.locator('#overrides-ignored').isVisible(), 'overrides must be marked as not applied');
      await screenshot(page, 'limits-killswitch');

      // A change the server refuses: its message shows, nothing is stored.
      await page.locator('#limit-queue').fill('reports');
      await page.getByLabel('Rate (jobs/s)').fill('9');
      await page.getByRole('button', { name: 'Save limit' }).click();
      const error = page.locator('#limit-form-error');
      await error.waitFor({ state: 'visible' });
      assert.match(await error.textContent(), /^The server did not save the limit: .*read[- ]only/);
      assert.equal(overrideOf(await conveyor.rateLimits(), 'reports'), undefined);
      await screenshot(page, 'limits-server-error');

      // The kill switch too: the server refuses, the page says why, nothing changes.
      const toggle = page.locator('#killswitch-toggle');
      assert.equal(await toggle.textContent(), 'Enable rate limiting');
      await toggle.click();
      await page.getByRole('dialog', { name: 'Enable rate limiting?' }).getByRole('button', { name: 'Enable' }).click();
      const refused = page.locator('#killswitch-error');
      await refused.waitFor({ state: 'visible' });
      assert.match(await refused.textContent(), /^Could not enable rate limiting: .*read[- ]only/);
      const limits = await conveyor.rateLimits();
      assert.equal(limits.enabled, false);
      assert.equal(limits.enabled_source, 'config');
      await showTab(page, 'Queues');
      await waitForCell(page, 'queues', 'email', 'source', 'disabled');
      await screenshot(page, 'queues-killswitch');
    } finally {
      await page.close();
    }
    assert.deepEqual(pageErrors, []);
  });

  test('the Jobs tab lists on a read-only server; a retry or bulk retry it refuses shows its message', async () => {
    const [job] = (await conveyor.admin('ListJobs', { queue: 'broken', states: ['failed'] })).jobs;
    const page = await openPage(`${conveyor.base}/#jobs/broken?state=failed&job=${job.id}`);
    try {
      await page.evaluate((t) => sessionStorage.setItem('conveyor.adminToken', t), TOKEN);
      await page.reload();
      await page.locator(`#jobs-table tbody tr[data-key="${job.id}"]`).waitFor();
      await waitFor('the detail to load', async () =>
        (await page.locator('#job-facts dd[data-fact="state"]').textContent()) === 'failed');
      await page.getByRole('button', { name: `Retry job ${job.id}` }).click();
      await page.getByRole('dialog', { name: `Retry job ${job.id}?` }).getByRole('button', { name: 'Retry' }).click();
      const error = page.locator('#job-error');
      await error.waitFor({ state: 'visible' });
      assert.match(await error.textContent(),
        new RegExp(`^Could not retry job ${job.id}: this server is read-only .* \\(permission_denied\\)$`));
      await page.locator('#jobs-retry-all').click();
      await page.getByRole('dialog', { name: 'Retry all failed jobs of broken?' })
        .getByRole('button', { name: 'Retry all' }).click();
      const bulk = page.locator('#jobs-bulk-error');
      await bulk.waitFor({ state: 'visible' });
      assert.match(await bulk.textContent(), /^Bulk retry of broken stopped: this server is read-only .* \(permission_denied\)$/);
      assert.equal(await page.locator('#jobs-bulk-status').textContent(), 'Retried 0 failed jobs of broken before the error below.');
      assert.equal((await conveyor.api('TaskService', 'GetJob', { id: job.id })).job.state, 'failed');
      await screenshot(page, 'jobs-read-only');
    } finally {
      await page.close();
    }
    assert.deepEqual(pageErrors, []);
  });
});
