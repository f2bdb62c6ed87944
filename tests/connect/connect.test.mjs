// Stock Connect clients against a real `conveyor serve` (SQLite in a temp
// dir, an admin token, 127.0.0.1): connect-es with its default transport
// (binary protobuf) and in JSON mode, over code that `buf generate` made from
// proto/ (run.sh does that into ./gen), and `buf curl --protocol connect` in
// both codecs. Every method of both services, auth failures, a validation
// error and a not_found. Limit scopes, the kill switch, job cost and job
// key in every client.
//
//   CONVEYOR_BIN=build/bin/conveyor CONVEYOR_PROTO_DIR=proto node --test connect.test.mjs
//
// Environment: CONVEYOR_BIN (required), CONVEYOR_PROTO_DIR (required, for
// buf curl's --schema), CONVEYOR_PLUGIN_DIR (default: the binary's own).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { AdminService } from './gen/conveyor/v1/admin_pb.js';
import { TaskService } from './gen/conveyor/v1/task_pb.js';

const conveyorBin = process.env.CONVEYOR_BIN;
const protoDir = process.env.CONVEYOR_PROTO_DIR;
const pluginDir = process.env.CONVEYOR_PLUGIN_DIR;
if (!conveyorBin) throw new Error('set CONVEYOR_BIN=/path/to/conveyor');
if (!protoDir) throw new Error('set CONVEYOR_PROTO_DIR=/path/to/proto');

const TOKEN = 'connect-secret-token';

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

let dir;
let base;
let server;
let serverExit;
let serverLog = '';

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'conveyor-connect-'));
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  const config = path.join(dir, 'conveyor.toml');
  fs.writeFileSync(config, [
    '[storage]',
    'plugin = "sqlite"',
    pluginDir ? `plugin_dir = ${JSON.stringify(pluginDir)}` : '',
    '[storage.options]',
    `path = ${JSON.stringify(path.join(dir, 'conveyor.db'))}`,
    '[engine]',
    'shutdown_timeout_ms = 500',
    '[server]',
    `listen = "127.0.0.1:${port}"`,
    `admin_token = "${TOKEN}"`,
    '',
  ].join('\n'));
  server = spawn(conveyorBin, ['--config', config, 'serve'], { stdio: ['ignore', 'pipe', 'pipe'] });
  server.stdout.on('data', (d) => { serverLog += d; });
  server.stderr.on('data', (d) => { serverLog += d; });
  serverExit = new Promise((resolve) => server.on('exit', (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (server.exitCode !== null) throw new Error(`conveyor serve exited ${server.exitCode}:\n${serverLog}`);
    try {
      if ((await fetch(`${base}/`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`conveyor serve did not answer on ${base}:\n${serverLog}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
});

after(async () => {
  if (server && server.exitCode === null) {
    server.kill('SIGTERM');
    const exit = await serverExit;
    assert.equal(exit.code, 0, `conveyor serve exited with ${exit.code ?? exit.signal}:\n${serverLog}`);
  }
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// Clients over one transport; seen collects each answer's Content-Type.
function clients({ json, token = TOKEN }) {
  const seen = [];
  const interceptor = (next) => async (req) => {
    if (token !== null) req.header.set('Authorization', `Bearer ${token}`);
    const res = await next(req);
    seen.push(res.header.get('content-type'));
    return res;
  };
  // The default transport is binary; JSON mode is the one option set here.
  const options = { baseUrl: base, httpVersion: '1.1', interceptors: [interceptor] };
  if (json) options.useBinaryFormat = false;
  const transport = createConnectTransport(options);
  return { admin: createClient(AdminService, transport), task: createClient(TaskService, transport), seen };
}

async function connectError(promise) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof ConnectError, `not a ConnectError: ${err}`);
    return err;
  }
  assert.fail('the call succeeded');
}

for (const mode of [{ name: 'default transport (binary protobuf)', json: false, type: 'application/proto' },
  { name: 'JSON mode', json: true, type: 'application/json' }]) {
  describe(`connect-es, ${mode.name}`, () => {
    const queue = mode.json ? 'es-json' : 'es-binary';

    test('every method', async () => {
      const { admin, task, seen } = clients({ json: mode.json });
      const set = await admin.setQueueRateLimit({ queue, ratePerSec: 2.5, burst: 4 });
      assert.equal(set.override.queue, queue);
      assert.equal(set.override.ratePerSec, 2.5);
      assert.equal(set.override.burst, 4);
      assert.match(set.override.updatedAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);

      const limits = await admin.listRateLimits({});
      assert.equal(limits.enabled, true);
      assert.deepEqual(limits.overrides.filter((o) => o.queue === queue).map((o) => [o.ratePerSec, o.burst]), [[2.5, 4]]);

      // Paused first: the built-in noop handler would finish the jobs at once.
      await admin.pauseQueue({ queue });
      const { id } = await task.enqueue({ job: { queue, kind: 'noop', payload: '{"n":1}', priority: 3, maxAttempts: 2, delaySeconds: 3600 } });
      assert.equal(typeof id, 'bigint');
      assert.ok(id > 0n);
      const { job } = await task.getJob({ id });
      assert.equal(job.id, id);
      assert.equal(job.queue, queue);
      assert.equal(job.kind, 'noop');
      assert.deepEqual(JSON.parse(job.payload), { n: 1 });
      assert.equal(job.state, 'scheduled');
      assert.equal(job.priority, 3);
      assert.equal(job.maxAttempts, 2);

      const batch = await task.enqueueBatch({ jobs: [{ queue, kind: 'noop' }, { queue, kind: 'noop' }] });
      assert.equal(batch.ids.length, 2);
      assert.ok(batch.ids[0] > id && batch.ids[1] > batch.ids[0]);
      assert.equal((await task.getJob({ id: batch.ids[1] })).job.payload, '{}');

      let info = (await admin.listQueues({})).queues.find((q) => q.queue === queue);
      assert.ok(info, 'the queue is listed');
      assert.equal(info.paused, true);
      assert.equal(info.pending, 2n);
      assert.equal(info.scheduled, 1n);
      assert.equal(info.limit.source, 'override');
      assert.equal(info.limit.ratePerSec, 2.5);
      await admin.resumeQueue({ queue });
      info = (await admin.listQueues({})).queues.find((q) => q.queue === queue);
      assert.equal(info.paused, false);

      await admin.deleteQueueRateLimit({ queue });
      const gone = await connectError(admin.deleteQueueRateLimit({ queue }));
      assert.equal(gone.code, Code.NotFound);
      assert.match(gone.rawMessage, new RegExp(`queue ${queue} has no rate-limit override`));
      const missing = await connectError(task.getJob({ id: 999_999n }));
      assert.equal(missing.code, Code.NotFound);

      // Every successful answer (refusals throw before the interceptor
      // records them) came in the codec this client asked for.
      assert.equal(seen.length, 11);
      for (const type of seen) assert.equal(type, mode.type);
    });

    test('validation errors are invalid_argument naming the field', async () => {
      const { admin, task } = clients({ json: mode.json });
      const paused = `${queue}-refused`;
      await admin.pauseQueue({ queue: paused });
      let err = await connectError(admin.setQueueRateLimit({ queue, ratePerSec: -1, burst: 1 }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^ratePerSec: rate must be a finite number greater than 0, got -1/);
      err = await connectError(task.enqueueBatch({ jobs: [{ queue: paused, kind: 'noop' }, { queue: paused, kind: 'bad kind' }] }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^jobs\[1\]\.kind: invalid job kind "bad kind"/);
      err = await connectError(task.getJob({ id: 0n }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.equal(err.rawMessage, 'id: must be a job id (a whole number >= 1), got 0');
      // Nothing of the refused batch was stored (the queue is paused: nothing ran either).
      const info = (await admin.listQueues({})).queues.find((q) => q.queue === paused);
      assert.equal(info?.pending ?? 0n, 0n);
    });

    test('job methods: ListJobs, RetryJobs, CancelJob, DeleteJobs', async () => {
      const { admin, task, seen } = clients({ json: mode.json });
      const q = `${queue}-jobs`;
      await admin.pauseQueue({ queue: q });  // nothing runs: states stay put
      const { ids } = await task.enqueueBatch({ jobs: [1, 2, 3].map(() => ({ queue: q, kind: 'noop', delaySeconds: 3600 })) });
      const { id: ready } = await task.enqueue({ job: { queue: q, kind: 'noop' } });

      let page = await admin.listJobs({ queue: q, states: ['scheduled'], limit: 2 });
      assert.deepEqual(page.jobs.map((j) => j.id), ids.slice(0, 2));
      assert.equal(page.nextAfterId, ids[1]);  // a full page: maybe more
      assert.equal(page.jobs[0].state, 'scheduled');
      assert.equal(page.jobs[0].leaseExpiresAt, '');  // not running
      page = await admin.listJobs({ queue: q, states: ['scheduled'], limit: 2, afterId: page.nextAfterId });
      assert.deepEqual(page.jobs.map((j) => j.id), [ids[2]]);
      assert.equal(page.nextAfterId, 0n);
      page = await admin.listJobs({ queue: q, states: ['pending'] });  // = available
      assert.deepEqual(page.jobs.map((j) => j.id), [ready]);

      const cancelled = await admin.cancelJob({ id: ids[0] });
      assert.equal(cancelled.job.id, ids[0]);
      assert.equal(cancelled.job.state, 'cancelled');
      let err = await connectError(admin.cancelJob({ id: ids[0] }));
      assert.equal(err.code, Code.FailedPrecondition);
      assert.match(err.rawMessage, /is already cancelled/);
      err = await connectError(admin.cancelJob({ id: 999_999n }));
      assert.equal(err.code, Code.NotFound);

      let retried = await admin.retryJobs({ ids: [ids[0], ids[1], 999_999n] });
      assert.deepEqual(retried.outcomes.map((o) => [o.id, o.outcome]),
        [[ids[0], 'ok'], [ids[1], 'wrong_state'], [999_999n, 'not_found']]);
      assert.equal(retried.retried, 1n);
      // Bulk: a queue's cancelled jobs, in batches of one.
      await admin.cancelJob({ id: ids[0] });
      await admin.cancelJob({ id: ids[1] });
      retried = await admin.retryJobs({ queue: q, state: 'cancelled', limit: 1 });
      assert.equal(retried.retried, 1n);
      assert.equal(retried.nextAfterId, ids[0]);
      retried = await admin.retryJobs({ queue: q, state: 'cancelled', limit: 1, afterId: retried.nextAfterId });
      assert.equal(retried.retried, 1n);
      retried = await admin.retryJobs({ queue: q, state: 'cancelled', limit: 1, afterId: retried.nextAfterId });
      assert.equal(retried.retried, 0n);
      assert.equal(retried.nextAfterId, 0n);

      await admin.cancelJob({ id: ids[2] });
      const deleted = await admin.deleteJobs({ ids: [ids[2], ready, 999_999n] });
      assert.deepEqual(deleted.outcomes.map((o) => o.outcome), ['ok', 'wrong_state', 'not_found']);
      assert.equal(deleted.deleted, 1n);
      assert.equal((await connectError(task.getJob({ id: ids[2] }))).code, Code.NotFound);

      err = await connectError(admin.listJobs({ queue: q, limit: 1001 }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^limit: must be 1\.\.1000/);
      err = await connectError(admin.listJobs({ queue: q, states: ['dead'] }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^states\[0\]: unknown job state "dead"/);
      err = await connectError(admin.retryJobs({ queue: q, state: 'running' }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^state: must be "failed" or "cancelled"/);
      err = await connectError(admin.deleteJobs({ ids: [] }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.equal(err.rawMessage, 'ids: give at least one job id');
      for (const type of seen) assert.equal(type, mode.type);
    });

    test('limit scope, the kill switch and job cost', async () => {
      const { admin, task, seen } = clients({ json: mode.json });
      const q = `${queue}-fleet`;
      let set = await admin.setQueueRateLimit({ queue: q, ratePerSec: 3, burst: 4, scope: 'fleet' });
      assert.equal(set.override.scope, 'fleet');
      let limits = await admin.listRateLimits({});
      assert.deepEqual(limits.overrides.filter((o) => o.queue === q).map((o) => o.scope), ['fleet']);
      let info = (await admin.listQueues({})).queues.find((x) => x.queue === q);
      assert.equal(info.limit.scope, 'fleet');
      assert.equal(info.limit.source, 'override');
      // Without a scope: process, as before scopes existed.
      set = await admin.setQueueRateLimit({ queue: q, ratePerSec: 3, burst: 4 });
      assert.equal(set.override.scope, 'process');
      let err = await connectError(admin.setQueueRateLimit({ queue: q, ratePerSec: 3, burst: 4, scope: 'galaxy' }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^scope: /);
      limits = await admin.listRateLimits({});
      assert.deepEqual(limits.overrides.filter((o) => o.queue === q).map((o) => o.scope), ['process']);

      // The kill switch: the answer is the state now in force, from storage.
      let state = await admin.setRateLimitingEnabled({ enabled: false });
      assert.equal(state.enabled, false);
      assert.equal(state.enabledSource, 'storage');
      limits = await admin.listRateLimits({});
      assert.equal(limits.enabled, false);
      assert.equal(limits.enabledSource, 'storage');
      info = (await admin.listQueues({})).queues.find((x) => x.queue === q);
      assert.equal(info.limit.source, 'disabled');
      state = await admin.setRateLimitingEnabled({ enabled: true });
      assert.equal(state.enabled, true);
      assert.equal(state.enabledSource, 'storage');
      assert.equal((await admin.listRateLimits({})).enabled, true);

      // Cost: stored with the job, seen by GetJob and ListJobs.
      await admin.pauseQueue({ queue: q });
      const { id } = await task.enqueue({ job: { queue: q, kind: 'noop', cost: 3 } });
      assert.equal((await task.getJob({ id })).job.cost, 3);
      const { ids } = await task.enqueueBatch({ jobs: [{ queue: q, kind: 'noop', cost: 2 }, { queue: q, kind: 'noop' }] });
      const page = await admin.listJobs({ queue: q });
      assert.deepEqual(page.jobs.map((j) => [j.id, j.cost]), [[id, 3], [ids[0], 2], [ids[1], 1]]);
      err = await connectError(task.enqueue({ job: { queue: q, kind: 'noop', cost: -1 } }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^job\.cost: cost must be a whole number of tokens from 1 to 1000000, got -1/);
      // More than the queue's burst (4): it could never start.
      err = await connectError(task.enqueue({ job: { queue: q, kind: 'noop', cost: 5 } }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /cost/);
      assert.equal((await admin.listJobs({ queue: q })).jobs.length, 3);
      await admin.deleteQueueRateLimit({ queue: q });
      for (const type of seen) assert.equal(type, mode.type);
    });

    test('job key: enqueued, seen by GetJob, ListJobs and ListKeys; a bad one refused naming it', async () => {
      const { admin, task, seen } = clients({ json: mode.json });
      const q = `${queue}-keys`;
      await admin.pauseQueue({ queue: q });
      const { id } = await task.enqueue({ job: { queue: q, kind: 'noop', key: 'tenant-\u00e9' } });
      assert.equal((await task.getJob({ id })).job.key, 'tenant-\u00e9');
      const longest = 'k'.repeat(200);
      const { ids } = await task.enqueueBatch({ jobs: [{ queue: q, kind: 'noop' }, { queue: q, kind: 'noop', key: longest }] });
      const page = await admin.listJobs({ queue: q });
      assert.deepEqual(page.jobs.map((j) => [j.id, j.key]), [[id, 'tenant-\u00e9'], [ids[0], ''], [ids[1], longest]]);
      let err = await connectError(task.enqueue({ job: { queue: q, kind: 'noop', key: `${longest}k` } }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^job\.key: key is 201 bytes; the longest is 200 bytes \(UTF-8\)/);
      err = await connectError(task.enqueueBatch({ jobs: [{ queue: q, kind: 'noop' }, { queue: q, kind: 'noop', key: `${longest}k` }] }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^jobs\[1\]\.key: /);
      assert.equal((await admin.listJobs({ queue: q })).jobs.length, 3);  // nothing stored
      // ListKeys: every key has one ready job (the queue is paused), so
      // bytewise order breaks the tie; this server's counts are live.
      const keys = await admin.listKeys({ queue: q });
      assert.deepEqual(keys.keys.map((k) => [k.key, k.ready, k.running, k.throttled]),
        [['', 1n, 0n, false], [longest, 1n, 0n, false], ['tenant-\u00e9', 1n, 0n, false]]);
      assert.equal(keys.totalKeys, 3n);
      assert.equal(keys.complete, true);
      assert.equal(keys.live, true);
      assert.equal(keys.fairness, 'fair');
      assert.equal(keys.limit.source, 'none');
      assert.equal(keys.limit.ratePerSec, undefined);
      assert.deepEqual((await admin.listKeys({ queue: q, limit: 1 })).keys.map((k) => k.key), ['']);
      err = await connectError(admin.listKeys({ queue: q, limit: 1001 }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.equal(err.rawMessage, 'limit: must be 1..1000 (0: 20), got 1001');
      for (const type of seen) assert.equal(type, mode.type);
    });

    test('settings of keys: a key\'s own limit, every key\'s, weights; ListKeys shows them', async () => {
      const { admin, task, seen } = clients({ json: mode.json });
      const q = `${queue}-key-settings`;
      await admin.pauseQueue({ queue: q });
      await task.enqueueBatch({ jobs: ['a', 'b', ''].map((key) => ({ queue: q, kind: 'noop', key })) });
      let set = await admin.setQueueRateLimit({ queue: q, key: 'a', ratePerSec: 2, burst: 3 });
      assert.equal(set.override, undefined);
      assert.equal(set.keySetting.queue, q);
      assert.equal(set.keySetting.key, 'a');
      assert.deepEqual([set.keySetting.limit.ratePerSec, set.keySetting.limit.burst, set.keySetting.limit.scope], [2, 3, 'process']);
      assert.match(set.keySetting.updatedAt, /^\d{4}-\d\d-\d\dT/);
      set = await admin.setQueueRateLimit({ queue: q, perKey: true, ratePerSec: 1, burst: 1 });
      assert.equal(set.keySetting.key, undefined);  // every key
      const weighted = await admin.setKeyWeight({ queue: q, key: 'b', weight: 3 });
      assert.equal(weighted.keySetting.weight, 3);
      assert.equal(weighted.keySetting.limit, undefined);
      // The empty key is a key like any other ("" present, not absent).
      set = await admin.setQueueRateLimit({ queue: q, key: '', ratePerSec: 5, burst: 5 });
      assert.equal(set.keySetting.key, '');

      const limits = await admin.listRateLimits({});
      assert.deepEqual(limits.keySettings.filter((k) => k.queue === q).map((k) => [k.key, k.limit?.ratePerSec, k.weight]),
        [['', 5, undefined], ['a', 2, undefined], ['b', undefined, 3], [undefined, 1, undefined]]);
      assert.ok(!limits.overrides.some((o) => o.queue === q), 'the queue has no override of its own');
      let keys = await admin.listKeys({ queue: q });
      assert.deepEqual(keys.keys.map((k) => [k.key, k.limit?.ratePerSec, k.limitSource, k.weight]),
        [['', 5, 'override', 1], ['a', 2, 'override', 1], ['b', 1, 'per-key-override', 3]]);
      assert.equal(keys.limit.source, 'per-key-override');
      assert.equal(keys.limit.ratePerSec, 1);

      await admin.deleteQueueRateLimit({ queue: q, key: 'a' });
      let err = await connectError(admin.deleteQueueRateLimit({ queue: q, key: 'a' }));
      assert.equal(err.code, Code.NotFound);
      assert.equal(err.rawMessage, `queue ${q} key "a" has no rate limit of its own`);
      await admin.deleteQueueRateLimit({ queue: q, perKey: true });
      await admin.deleteQueueRateLimit({ queue: q, key: '' });
      await admin.deleteKeyWeight({ queue: q, key: 'b' });
      err = await connectError(admin.deleteKeyWeight({ queue: q, key: 'b' }));
      assert.equal(err.code, Code.NotFound);
      keys = await admin.listKeys({ queue: q });
      assert.deepEqual(keys.keys.map((k) => [k.key, k.limit, k.limitSource, k.weight]),
        [['', undefined, 'none', 1], ['a', undefined, 'none', 1], ['b', undefined, 'none', 1]]);

      err = await connectError(admin.setQueueRateLimit({ queue: q, key: 'a', perKey: true, ratePerSec: 1, burst: 1 }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^perKey: give key \(one key's own limit\) or perKey/);
      err = await connectError(admin.setKeyWeight({ queue: q, key: 'b', weight: 0 }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.equal(err.rawMessage, 'weight: weight must be 1..1000, got 0');
      err = await connectError(admin.setQueueRateLimit({ queue: q, key: 'k'.repeat(201), ratePerSec: 1, burst: 1 }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^key: key is 201 bytes/);
      assert.ok(!(await admin.listRateLimits({})).keySettings.some((k) => k.queue === q), 'nothing refused was stored');
      for (const type of seen) assert.equal(type, mode.type);
    });

    test('no token and a wrong token are unauthenticated', async () => {
      for (const token of [null, 'not-the-token']) {
        const { admin, task } = clients({ json: mode.json, token });
        const err = await connectError(admin.listQueues({}));
        assert.equal(err.code, Code.Unauthenticated);
        assert.match(err.rawMessage, token === null ? /missing Authorization header/ : /wrong admin token/);
        const write = await connectError(task.enqueue({ job: { queue: `${queue}-denied`, kind: 'noop' } }));
        assert.equal(write.code, Code.Unauthenticated);
      }
      const { admin } = clients({ json: mode.json });
      const queues = (await admin.listQueues({})).queues.map((q) => q.queue);
      assert.ok(!queues.includes(`${queue}-denied`), 'a refused enqueue stored nothing');
    });
  });
}

// ---- buf curl, and raw Connect JSON ---------------------------------------------

// buf curl's Connect protocol is binary protobuf (it refuses a Content-Type
// header: "reserved"), so JSON is covered here by raw POSTs with
// Content-Type: application/json, as curl or a browser's fetch sends them.
function bufCurl(method, body, { token = TOKEN } = {}) {
  const service = ['Enqueue', 'EnqueueBatch', 'GetJob'].includes(method) ? 'TaskService' : 'AdminService';
  const args = ['curl', '--protocol', 'connect', '--schema', protoDir, '--data', JSON.stringify(body)];
  if (token !== null) args.push('--header', `Authorization: Bearer ${token}`);
  args.push(`${base}/conveyor.v1.${service}/${method}`);
  const buf = path.resolve('node_modules/.bin/buf');
  return new Promise((resolve) => {
    execFile(buf, args, { timeout: 60_000, env: { ...process.env, BUF_CACHE_DIR: path.resolve('buf-cache') } },
      (error, stdout, stderr) => resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr }));
  });
}

// A raw Connect JSON call: { code: 0, stdout: answer } or { code: 1, stderr: error body },
// shaped as bufCurl's results.
async function jsonPost(method, body, { token = TOKEN } = {}) {
  const service = ['Enqueue', 'EnqueueBatch', 'GetJob'].includes(method) ? 'TaskService' : 'AdminService';
  const headers = { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' };
  if (token !== null) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(`${base}/conveyor.v1.${service}/${method}`, { method: 'POST', headers, body: JSON.stringify(body) });
  const text = await response.text();
  if (response.ok) {
    assert.equal(response.headers.get('content-type'), 'application/json');
    return { code: 0, stdout: text, stderr: '' };
  }
  return { code: 1, stdout: '', stderr: `HTTP ${response.status} ${text}` };
}

for (const client of [{ name: 'buf curl --protocol connect (binary protobuf)', call: bufCurl, queue: 'curl-binary' },
  { name: 'raw Connect JSON (application/json)', call: jsonPost, queue: 'raw-json' }]) {
  test(`${client.name}: every method`, async () => {
    const { queue, call } = client;
    const ok = async (method, body) => {
      const r = await call(method, body);
      assert.equal(r.code, 0, `${method} failed: ${r.stderr}`);
      return r.stdout.trim() === '' ? {} : JSON.parse(r.stdout);
    };
    const set = await ok('SetQueueRateLimit', { queue, ratePerSec: 7, burst: 2 });
    assert.equal(set.override.queue, queue);
    assert.equal(set.override.ratePerSec, 7);
    const limits = await ok('ListRateLimits', {});
    assert.ok(limits.overrides.some((o) => o.queue === queue && o.burst === 2), JSON.stringify(limits));
    await ok('PauseQueue', { queue });
    const { id } = await ok('Enqueue', { job: { queue, kind: 'noop', delaySeconds: 60 } });
    assert.match(id, /^\d+$/);  // int64 is a string in JSON
    const { job } = await ok('GetJob', { id });
    assert.equal(job.queue, queue);
    assert.equal(job.state, 'scheduled');
    const { ids } = await ok('EnqueueBatch', { jobs: [{ queue, kind: 'noop' }] });
    assert.equal(ids.length, 1);
    let info = (await ok('ListQueues', {})).queues.find((q) => q.queue === queue);
    assert.equal(info.paused, true);
    assert.equal(info.pending, '1');
    assert.equal(info.scheduled, '1');
    await ok('ResumeQueue', { queue });
    info = (await ok('ListQueues', {})).queues.find((q) => q.queue === queue);
    assert.ok(!info.paused);
    await ok('DeleteQueueRateLimit', { queue });

    let r = await call('DeleteQueueRateLimit', { queue });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /not_found/);
    r = await call('SetQueueRateLimit', { queue, ratePerSec: 0, burst: 1 });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid_argument/);
    assert.match(r.stderr, /ratePerSec: rate must be a finite number greater than 0/);
    for (const token of [null, 'not-the-token']) {
      r = await call('ListQueues', {}, { token });
      assert.notEqual(r.code, 0);
      assert.match(r.stderr, /unauthenticated/);
    }
  });

  test(`${client.name}: scope, kill switch and cost`, async () => {
    const { call } = client;
    const queue = `${client.queue}-fleet`;
    const ok = async (method, body) => {
      const r = await call(method, body);
      assert.equal(r.code, 0, `${method} failed: ${r.stderr}`);
      return r.stdout.trim() === '' ? {} : JSON.parse(r.stdout);
    };
    const set = await ok('SetQueueRateLimit', { queue, ratePerSec: 2, burst: 3, scope: 'fleet' });
    assert.equal(set.override.scope, 'fleet');
    const info = (await ok('ListQueues', {})).queues.find((q) => q.queue === queue);
    assert.equal(info.limit.scope, 'fleet');
    let r = await call('SetQueueRateLimit', { queue, ratePerSec: 2, burst: 3, scope: 'FLEET' });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid_argument/);
    assert.match(r.stderr, /scope: /);
    let state = await ok('SetRateLimitingEnabled', { enabled: false });
    assert.equal(state.enabled ?? false, false);  // buf curl may leave out a default
    assert.equal(state.enabledSource, 'storage');
    let limits = await ok('ListRateLimits', {});
    assert.equal(limits.enabled ?? false, false);
    assert.equal(limits.enabledSource, 'storage');
    state = await ok('SetRateLimitingEnabled', { enabled: true });
    assert.equal(state.enabled, true);
    limits = await ok('ListRateLimits', {});
    assert.equal(limits.enabled, true);
    await ok('PauseQueue', { queue });
    const { id } = await ok('Enqueue', { job: { queue, kind: 'noop', cost: 3 } });
    const { job } = await ok('GetJob', { id });
    assert.equal(job.cost, 3);
    r = await call('Enqueue', { job: { queue, kind: 'noop', cost: -1 } });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid_argument/);
    assert.match(r.stderr, /job\.cost: cost must be a whole number of tokens from 1 to 1000000, got -1/);
    r = await call('Enqueue', { job: { queue, kind: 'noop', cost: 4 } });  // over burst 3
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid_argument/);
    assert.match(r.stderr, /cost/);
    await ok('DeleteQueueRateLimit', { queue });
  });

  test(`${client.name}: job key`, async () => {
    const { call } = client;
    const queue = `${client.queue}-keys`;
    const ok = async (method, body) => {
      const r = await call(method, body);
      assert.equal(r.code, 0, `${method} failed: ${r.stderr}`);
      return r.stdout.trim() === '' ? {} : JSON.parse(r.stdout);
    };
    await ok('PauseQueue', { queue });
    const { id } = await ok('Enqueue', { job: { queue, kind: 'noop', key: 'tenant-42' } });
    assert.equal((await ok('GetJob', { id })).job.key, 'tenant-42');
    const { ids } = await ok('EnqueueBatch', { jobs: [{ queue, kind: 'noop' }, { queue, kind: 'noop', key: 'b' }] });
    const page = await ok('ListJobs', { queue });
    // buf curl may leave out a default: the empty key.
    assert.deepEqual(page.jobs.map((j) => [j.id, j.key ?? '']), [[id, 'tenant-42'], [ids[0], ''], [ids[1], 'b']]);
    let r = await call('Enqueue', { job: { queue, kind: 'noop', key: 'k'.repeat(201) } });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid_argument/);
    assert.match(r.stderr, /job\.key: key is 201 bytes; the longest is 200 bytes/);
    if (client.call === jsonPost) {  // buf curl checks the type itself
      r = await call('Enqueue', { job: { queue, kind: 'noop', key: 42 } });
      assert.notEqual(r.code, 0);
      assert.match(r.stderr, /invalid_argument/);
      assert.match(r.stderr, /job\.key: must be a string, got 42/);
    }
    assert.equal((await ok('ListJobs', { queue })).jobs.length, 3);
    // ListKeys: one ready job per key (paused), bytewise; buf curl may leave
    // out defaults (the empty key, zero running, false).
    const keys = await ok('ListKeys', { queue, limit: 2 });
    assert.deepEqual(keys.keys.map((k) => [k.key ?? '', k.ready, k.running ?? '0', k.throttled ?? false]),
      [['', '1', '0', false], ['b', '1', '0', false]]);
    assert.equal(keys.totalKeys, '3');
    assert.equal(keys.limit.source, 'none');
    assert.equal(keys.live, true);
    r = await call('ListKeys', { queue, limit: 1001 });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid_argument/);
    assert.match(r.stderr, /limit: must be 1\.\.1000/);
  });

  test(`${client.name}: settings of keys`, async () => {
    const { call } = client;
    const queue = `${client.queue}-key-settings`;
    const ok = async (method, body) => {
      const r = await call(method, body);
      assert.equal(r.code, 0, `${method} failed: ${r.stderr}`);
      return r.stdout.trim() === '' ? {} : JSON.parse(r.stdout);
    };
    await ok('PauseQueue', { queue });
    await ok('EnqueueBatch', { jobs: [{ queue, kind: 'noop', key: 'a' }, { queue, kind: 'noop', key: 'b' }] });
    let set = await ok('SetQueueRateLimit', { queue, key: 'a', ratePerSec: 2, burst: 3, scope: 'process' });
    assert.equal(set.keySetting.key, 'a');
    assert.equal(set.keySetting.limit.burst, 3);
    set = await ok('SetQueueRateLimit', { queue, perKey: true, ratePerSec: 1, burst: 1 });
    assert.equal(set.keySetting.key, undefined);
    const weighted = await ok('SetKeyWeight', { queue, key: 'b', weight: 7 });
    assert.equal(weighted.keySetting.weight, 7);
    const limits = await ok('ListRateLimits', {});
    assert.deepEqual(limits.keySettings.filter((k) => k.queue === queue).map((k) => [k.key ?? null, k.weight ?? null]),
      [['a', null], ['b', 7], [null, null]]);
    const keys = await ok('ListKeys', { queue });
    assert.deepEqual(keys.keys.map((k) => [k.key, k.limitSource, k.weight]),
      [['a', 'override', 1], ['b', 'per-key-override', 7]]);
    assert.equal(keys.keys[1].limit.ratePerSec, 1);
    let r = await call('SetKeyWeight', { queue, key: 'b', weight: 1001 });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid_argument/);
    assert.match(r.stderr, /weight: weight must be 1\.\.1000, got 1001/);
    r = await call('DeleteQueueRateLimit', { queue, key: 'a', perKey: true });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid_argument/);
    assert.match(r.stderr, /perKey: /);
    await ok('DeleteQueueRateLimit', { queue, key: 'a' });
    await ok('DeleteQueueRateLimit', { queue, perKey: true });
    await ok('DeleteKeyWeight', { queue, key: 'b' });
    r = await call('DeleteKeyWeight', { queue, key: 'b' });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /not_found/);
    assert.ok(!(await ok('ListRateLimits', {})).keySettings?.some((k) => k.queue === queue));
  });

  test(`${client.name}: job methods`, async () => {
    const { call } = client;
    const queue = `${client.queue}-jobs`;
    const ok = async (method, body) => {
      const r = await call(method, body);
      assert.equal(r.code, 0, `${method} failed: ${r.stderr}`);
      return r.stdout.trim() === '' ? {} : JSON.parse(r.stdout);
    };
    await ok('PauseQueue', { queue });
    const { ids } = await ok('EnqueueBatch', { jobs: [{ queue, kind: 'noop', delaySeconds: 3600 }, { queue, kind: 'noop', delaySeconds: 3600 }] });
    let page = await ok('ListJobs', { queue, states: ['scheduled'], limit: 1 });
    assert.deepEqual(page.jobs.map((j) => j.id), [ids[0]]);
    assert.equal(page.nextAfterId, ids[0]);  // int64: a string in JSON
    page = await ok('ListJobs', { queue, afterId: ids[0] });
    assert.deepEqual(page.jobs.map((j) => j.id), [ids[1]]);
    assert.equal(page.nextAfterId ?? '0', '0');  // buf curl may leave out a default
    const { job } = await ok('CancelJob', { id: ids[0] });
    assert.equal(job.state, 'cancelled');
    let r = await call('CancelJob', { id: ids[0] });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /failed_precondition/);
    const retried = await ok('RetryJobs', { ids: [ids[0], '999999'] });
    assert.deepEqual(retried.outcomes.map((o) => o.outcome), ['ok', 'not_found']);
    assert.equal(retried.retried, '1');
    await ok('CancelJob', { id: ids[1] });
    const bulk = await ok('RetryJobs', { queue, state: 'cancelled' });
    assert.equal(bulk.retried, '1');
    assert.equal(bulk.nextAfterId ?? '0', '0');
    await ok('CancelJob', { id: ids[1] });
    const deleted = await ok('DeleteJobs', { ids: [ids[1], ids[0]] });
    assert.deepEqual(deleted.outcomes.map((o) => o.outcome), ['ok', 'wrong_state']);
    assert.equal(deleted.deleted, '1');
    r = await call('ListJobs', { queue, limit: 5000 });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /invalid_argument/);
    assert.match(r.stderr, /limit: must be 1\.\.1000/);
    r = await call('RetryJobs', {}, { token: null });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /unauthenticated/);
  });
}
