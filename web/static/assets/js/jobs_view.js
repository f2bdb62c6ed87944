// The Jobs tab: one queue's jobs, filtered by state and kind, a page of 50
// at a time (keyset pagination: a stack of cursors for Previous), a job's
// detail with Retry and Cancel, and "Retry all failed" in batches. Above
// them the queue's Keys card (keys_view.js); with a key picked, the list
// shows that key's jobs: ListJobs has no key filter, so a window of up to
// KEY_WINDOW jobs is read per page and filtered here.

import { callAdmin, callTask } from './api.js';
import { confirmAction } from './confirm.js';
import { el, setText, syncRows } from './dom.js';
import { formatCount, formatTimestamp, toNumber, truncate } from './format.js';
import { KeysPanel } from './keys_view.js';
import { jobsHash, navigate } from './route.js';

const PAGE_SIZE = 50;
const KEY_WINDOW = 1000;  // ListJobs' largest page
// RetryJobs' bulk form does up to this many per call; the loop follows its cursor.
const BULK_BATCH = 200;
const FINAL = new Set(['completed', 'failed', 'cancelled']);
const RETRYABLE = new Set(['failed', 'cancelled']);
const STATES = ['available', 'scheduled', 'running', 'completed', 'failed', 'cancelled'];
// ListQueues' count field of each Job.state.
const COUNT_FIELD = {
  available: 'pending', scheduled: 'scheduled', running: 'running',
  completed: 'completed', failed: 'failed', cancelled: 'cancelled',
};
const OUTCOMES = {
  not_found: 'not_found: there is no such job (deleted?)',
  wrong_state: 'wrong_state: only failed or cancelled jobs can be retried',
};

export function stateBadge(state) {
  const known = STATES.includes(state) ? state : 'unknown';
  return el('span', { class: `badge badge-state badge-${known}`, text: state === 'available' ? 'pending' : state });
}

// Pretty JSON when the payload is valid JSON, else the text as it is.
function formatPayload(payload) {
  const text = payload ?? '';
  try {
    return { text: JSON.stringify(JSON.parse(text), null, 2), json: true };
  } catch {
    return { text, json: false };
  }
}

function errorText(err) {
  return err.code && err.code !== 'unknown' ? `${err.message} (${err.code})` : err.message;
}

export class JobsView {
  constructor() {
    this.panel = document.getElementById('panel-jobs');
    this.title = document.getElementById('jobs-title');
    this.queueSelect = document.getElementById('jobs-queue');
    this.stateSelect = document.getElementById('jobs-state');
    this.kindInput = document.getElementById('jobs-kind');
    this.knownKinds = document.getElementById('known-kinds');
    this.table = document.getElementById('jobs-table');
    this.tbody = this.table.querySelector('tbody');
    this.empty = document.getElementById('jobs-empty');
    this.error = document.getElementById('jobs-error');
    this.prev = document.getElementById('jobs-prev');
    this.next = document.getElementById('jobs-next');
    this.pageLabel = document.getElementById('jobs-page');
    this.retryAll = document.getElementById('jobs-retry-all');
    this.bulkStatus = document.getElementById('jobs-bulk-status');
    this.bulkError = document.getElementById('jobs-bulk-error');
    this.detail = {
      card: document.getElementById('job-detail'),
      title: document.getElementById('job-detail-title'),
      error: document.getElementById('job-error'),
      ok: document.getElementById('job-ok'),
      facts: document.getElementById('job-facts'),
      lastError: document.getElementById('job-last-error'),
      payloadTitle: document.getElementById('job-payload-title'),
      payload: document.getElementById('job-payload'),
      retry: document.getElementById('job-retry'),
      cancel: document.getElementById('job-cancel'),
      close: document.getElementById('job-close'),
    };

    this.visible = false;
    this.listShown = false;   // no page loaded yet
    this.route = { queue: '', state: '', kind: '', key: null, job: null };
    this.keys = new KeysPanel((key) => this.go({ ...this.route, key, job: null }, true));
    this.cursors = ['0'];     // after_id of each page so far; the last is this page's
    this.nextCursor = '0';    // '0': this page is the last
    this.jobs = [];
    this.job = null;          // the job in the detail card
    this.queues = [];
    this.kinds = new Set();
    this.listSeq = 0;         // answers to older requests are dropped
    this.detailSeq = 0;
    this.listLoading = null;
    this.detailLoading = null;
    this.openedHere = false;  // the detail was opened by a click: Close goes back

    this.queueSelect.addEventListener('change', () =>
      this.go({ queue: this.queueSelect.value, state: this.route.state }, true));
    this.stateSelect.addEventListener('change', () =>
      this.go({ ...this.route, state: this.stateSelect.value, job: null }));
    this.kindInput.addEventListener('change', () =>
      this.go({ ...this.route, kind: this.kindInput.value.trim(), job: null }));
    this.prev.addEventListener('click', () => this.page(-1));
    this.next.addEventListener('click', () => this.page(1));
    this.retryAll.addEventListener('click', () => this.retryAllFailed());
    this.detail.close.addEventListener('click', () => this.closeDetail());
    this.detail.retry.addEventListener('click', () => this.retryJob());
    this.detail.cancel.addEventListener('click', () => this.cancelJob());
  }

  // The hash of this tab as last seen (for the tab button).
  hash() {
    return jobsHash({ ...this.route, queue: this.route.queue || this.queues[0]?.queue || '' });
  }

  go(route, push = false) {
    navigate(jobsHash(route), { push });
  }

  hide() {
    this.visible = false;
  }

  // The hash named this tab: follow its queue, filters and job.
  show(route) {
    this.visible = true;
    if (!route.queue && this.queues.length > 0) {
      this.go({ ...route, queue: this.route.queue || this.queues[0].queue });
      return;
    }
    if (!route.queue) {
      // No queue in the link and none known (yet): nothing to list.
      this.route = route;
      this.renderHeader();
      this.keys.show('', null);
      this.tbody.closest('.table-wrap').hidden = true;
      setText(this.empty, 'No queues yet: jobs show here once a queue has some.');
      this.empty.hidden = false;
      return;
    }
    const old = this.route;
    route = { ...route, key: route.key ?? null };
    const listChanged = !this.listShown || route.queue !== old.queue || route.state !== old.state ||
      route.kind !== old.kind || route.key !== old.key;
    if (route.queue !== old.queue) {
      this.kinds.clear();
      this.bulkStatus.hidden = true;
      this.bulkError.hidden = true;
    }
    if (!route.job) this.openedHere = false;
    this.route = route;
    this.stateSelect.value = STATES.includes(route.state) ? route.state : '';
    if (document.activeElement !== this.kindInput) this.kindInput.value = route.kind;
    this.renderQueueSelect();
    this.renderHeader();
    this.keys.show(route.queue, route.key);
    if (listChanged) {
      this.listShown = true;
      this.cursors = ['0'];
      this.nextCursor = '0';
      this.jobs = [];
      this.tbody.replaceChildren();
      this.loadPage();
    } else {
      for (const row of this.tbody.rows) this.updateRow(row, row.job);
    }
    const shown = this.detail.card.hidden ? '' : String(this.job?.id ?? '');
    if (String(route.job ?? '') !== shown) this.openDetail(route.job);
  }

  // Each poll: fresh counts (for the header and bulk button), then this page
  // and the open job again, unless a load is still under way.
  render(queues) {
    this.queues = queues;
    if (!this.visible) return;
    if (!this.route.queue && queues.length > 0) {
      this.go({ ...this.route, queue: queues[0].queue });
      return;
    }
    this.renderQueueSelect();
    this.renderHeader();
  }

  async poll() {
    if (!this.visible || !this.route.queue) return;
    await Promise.all([
      this.listLoading ?? this.loadPage(),
      this.keys.poll(),
      this.job && !this.detailLoading && !this.acting ? this.loadDetail(this.job.id, false) : null,
    ]);
  }

  queueInfo() {
    return this.queues.find((q) => q.queue === this.route.queue);
  }

  renderQueueSelect() {
    const names = this.queues.map((q) => q.queue);
    if (this.route.queue && !names.includes(this.route.queue)) names.push(this.route.queue);
    const current = [...this.queueSelect.options].map((o) => o.value);
    if (current.join('\n') !== names.join('\n')) {
      this.queueSelect.replaceChildren(...names.map((n) => el('option', { value: n, text: n })));
    }
    this.queueSelect.value = this.route.queue;
  }

  // The title and page line say what is listed; totals come from ListQueues
  // (no total is known for one kind).
  renderHeader() {
    const { queue, state, kind, key } = this.route;
    const stateText = state ? (state === 'available' ? 'pending' : state) : '';
    setText(this.title, queue ? `Jobs of ${queue}${key === null ? '' : `, key ${key === '' ? '(empty key)' : truncate(key, 40)}`}` : 'Jobs');
    const info = this.queueInfo();
    let total = null;
    if (info && !kind && key === null) {
      total = state ? toNumber(info[COUNT_FIELD[state]])
        : Object.values(COUNT_FIELD).reduce((sum, f) => sum + toNumber(info[f]), 0);
    }
    const page = this.cursors.length;
    // Counts and pages are read apart: never "page 6 of 5".
    const of = total === null ? '' : ` of ${Math.max(page, Math.ceil(total / PAGE_SIZE))}`;
    const what = `${stateText ? `${stateText} ` : ''}${kind ? `${kind} ` : ''}jobs`;
    const filtered = key === null ? '' : ` · this key's among up to ${formatCount(KEY_WINDOW)} jobs per page (filtered in the browser)`;
    setText(this.pageLabel, `Page ${page}${of}${total === null ? '' : ` · ${formatCount(total)} ${what}`}${filtered}`);
    this.prev.disabled = page <= 1;
    this.next.disabled = this.nextCursor === '0';
    const failed = info ? toNumber(info.failed) : 0;
    this.retryAll.disabled = this.bulkRunning || !queue || failed === 0;
    setText(this.retryAll, failed > 0 ? `Retry all ${formatCount(failed)} failed` : 'Retry all failed');
  }

  page(step) {
    if (step > 0 && this.nextCursor !== '0') this.cursors.push(this.nextCursor);
    else if (step < 0 && this.cursors.length > 1) this.cursors.pop();
    else return;
    this.nextCursor = '0';
    this.renderHeader();
    this.loadPage();
  }

  loadPage() {
    const seq = ++this.listSeq;
    const { queue, state, kind, key } = this.route;
    if (!queue) return null;
    const request = { queue, afterId: this.cursors.at(-1), limit: key === null ? PAGE_SIZE : KEY_WINDOW };
    if (state) request.states = [state];
    if (kind) request.kind = kind;
    const loading = callAdmin('ListJobs', request).then((answer) => {
      if (seq !== this.listSeq) return;
      this.error.hidden = true;
      const jobs = answer.jobs ?? [];
      this.renderPage(key === null ? jobs : jobs.filter((j) => (j.key ?? '') === key),
        String(answer.nextAfterId ?? '0'));
    }, (err) => {
      if (seq !== this.listSeq) return;
      setText(this.error, `Could not list the jobs of ${queue}: ${errorText(err)}`);
      this.error.hidden = false;
      if (this.tbody.rows.length === 0) this.tbody.closest('.table-wrap').hidden = true;
    }).finally(() => {
      if (this.listLoading === loading) this.listLoading = null;
    });
    this.listLoading = loading;
    return loading;
  }

  renderPage(jobs, nextCursor) {
    this.jobs = jobs;
    this.nextCursor = nextCursor;
    const wrap = this.tbody.closest('.table-wrap');
    wrap.hidden = jobs.length === 0;
    this.empty.hidden = jobs.length > 0;
    if (jobs.length === 0) {
      const { queue, state, kind, key } = this.route;
      const stateText = state === 'available' ? 'pending ' : state ? `${state} ` : '';
      const ofKey = key === null ? '' : ` of key ${key === '' ? '(empty key)' : key}`;
      setText(this.empty, key !== null && nextCursor !== '0'
        ? `No ${stateText}jobs${ofKey} among these ${formatCount(KEY_WINDOW)} jobs: Next looks further.`
        : this.cursors.length > 1
          ? `No more jobs${ofKey} past the previous page.`
          : `No ${stateText}jobs${kind ? ` of kind ${kind}` : ''}${ofKey} in queue ${queue}.`);
    }
    // The Key column only when a job of the page has a key (the empty key is
    // every job's until keys are used).
    this.table.classList.toggle('no-keys', !jobs.some((j) => j.key));
    syncRows(this.tbody, jobs, (j) => String(j.id), (j) => this.createRow(j), (row, j) => this.updateRow(row, j));
    let added = false;
    for (const j of jobs) {
      if (!this.kinds.has(j.kind)) {
        this.kinds.add(j.kind);
        added = true;
      }
    }
    if (added) this.knownKinds.replaceChildren(...[...this.kinds].sort().map((k) => el('option', { value: k })));
    this.renderHeader();
  }

  createRow(j) {
    const cell = (field, label, cls) => el('td', { class: cls, dataset: { field, label } });
    const row = el('tr', { class: 'clickable' },
      cell('id', 'ID', 'num title-cell'),
      cell('key', 'Key', 'key-cell key-col'),
      cell('kind', 'Kind'),
      cell('state', 'State'),
      cell('attempt', 'Attempt', 'num'),
      cell('run_at', 'Run at'),
      cell('last_error', 'Last error', 'error-cell'));
    row.cells[0].append(el('a', { class: 'job-link', 'aria-label': `Job ${j.id}` }));
    // The whole row opens the job; the id is the link (keyboard, new tab).
    row.addEventListener('click', (event) => {
      if (event.target.closest('a') || window.getSelection().toString() !== '') return;
      this.openedHere = true;
      this.go({ ...this.route, job: String(row.job.id) }, true);
    });
    row.cells[0].firstElementChild.addEventListener('click', () => {
      this.openedHere = true;
    });
    return row;
  }

  updateRow(row, j) {
    row.job = j;
    const link = row.cells[0].firstElementChild;
    setText(link, String(j.id));
    link.setAttribute('href', jobsHash({ ...this.route, job: String(j.id) }));
    const [, keyCell, kindCell, stateCell, attemptCell, runAtCell, errorCell] = row.cells;
    // "–" for the empty key; a long key cut, whole in the tooltip.
    setText(keyCell, j.key ? truncate(j.key, 40) : '–');
    keyCell.classList.toggle('muted', !j.key);
    if (j.key) keyCell.title = j.key;
    else keyCell.removeAttribute('title');
    setText(kindCell, j.kind);
    const badge = stateCell.firstElementChild;
    if (!badge || badge.dataset.state !== j.state) {
      const b = stateBadge(j.state);
      b.dataset.state = j.state;
      stateCell.replaceChildren(b);
    }
    setText(attemptCell, `${toNumber(j.attempt)}/${toNumber(j.maxAttempts)}`);
    setText(runAtCell, formatTimestamp(j.runAt));
    setText(errorCell, truncate(j.lastError, 80));
    if (j.lastError) errorCell.title = j.lastError;
    else errorCell.removeAttribute('title');
    row.classList.toggle('selected', String(j.id) === String(this.route.job));
  }

  // ---- the detail card ----------------------------------------------------------

  openDetail(id) {
    this.detail.error.hidden = true;
    this.detail.ok.hidden = true;
    if (!id) {
      this.job = null;
      this.detail.card.hidden = true;
      return;
    }
    this.job = { id };
    this.detail.card.hidden = false;
    setText(this.detail.title, `Job ${id}`);
    this.detail.facts.replaceChildren();
    this.detail.retry.hidden = true;
    this.detail.cancel.hidden = true;
    setText(this.detail.lastError, '');
    setText(this.detail.payload, '');
    if (this.openedHere) this.detail.card.scrollIntoView({ block: 'nearest' });
    this.loadDetail(id, true);
  }

  closeDetail() {
    if (this.openedHere) history.back();
    else this.go({ ...this.route, job: null });
  }

  loadDetail(id, first) {
    const seq = ++this.detailSeq;
    const loading = callTask('GetJob', { id }).then((answer) => {
      if (seq !== this.detailSeq || String(this.job?.id) !== String(id)) return;
      this.renderDetail(answer.job);
    }, (err) => {
      if (seq !== this.detailSeq || String(this.job?.id) !== String(id)) return;
      // A poll that fails keeps what is shown; the first load says why it shows nothing.
      if (first || err.code === 'not_found') this.showDetailError(`Could not load job ${id}: ${errorText(err)}`);
    }).finally(() => {
      if (this.detailLoading === loading) this.detailLoading = null;
    });
    this.detailLoading = loading;
    return loading;
  }

  showDetailError(text) {
    this.detail.ok.hidden = true;
    setText(this.detail.error, text);
    this.detail.error.hidden = false;
  }

  showDetailOk(text) {
    this.detail.error.hidden = true;
    setText(this.detail.ok, text);
    this.detail.ok.hidden = false;
  }

  renderDetail(job) {
    this.job = job;
    const d = this.detail;
    setText(d.title, `Job ${job.id}`);
    const facts = [
      ['Queue', job.queue],
      ['Kind', job.kind],
      // The key its queue's per-key limits and fair turns count it under.
      ['Key', job.key ? job.key : el('span', { class: 'muted', text: 'none (the empty key)' })],
      ['State', stateBadge(job.state)],
      ['Attempts', `${toNumber(job.attempt)} of ${toNumber(job.maxAttempts)}`],
      ['Priority', String(toNumber(job.priority))],
      ['Created', formatTimestamp(job.createdAt)],
      ['Run at', formatTimestamp(job.runAt)],
      // When the latest attempt started (empty before the first one).
      ['Started', formatTimestamp(job.startedAt)],
      ['Finalized', formatTimestamp(job.finalizedAt)],
      ['Lease expires', formatTimestamp(job.leaseExpiresAt)],
    ];
    d.facts.replaceChildren(...facts.flatMap(([name, value]) => [
      el('dt', { text: name }),
      el('dd', { dataset: { fact: name.toLowerCase().replace(/ /g, '-') } }, value),
    ]));
    setText(d.lastError, job.lastError || 'none');
    d.lastError.classList.toggle('muted', !job.lastError);
    const payload = formatPayload(job.payload);
    setText(d.payloadTitle, payload.json ? 'Payload' : 'Payload (not valid JSON: shown as stored)');
    setText(d.payload, payload.text);
    d.retry.hidden = !RETRYABLE.has(job.state);
    d.cancel.hidden = FINAL.has(job.state);
    d.retry.setAttribute('aria-label', `Retry job ${job.id}`);
    d.cancel.setAttribute('aria-label', `Cancel job ${job.id}`);
    for (const row of this.tbody.rows) row.classList.toggle('selected', String(row.job.id) === String(job.id));
  }

  // Acts on the job as shown when the button was pressed; the server judges
  // whether it still may (another operator may have acted meanwhile).
  async act(button, run) {
    this.acting = true;
    button.disabled = true;
    try {
      await run();
    } finally {
      button.disabled = false;
      this.acting = false;
      await Promise.all([this.job ? this.loadDetail(this.job.id, false) : null, this.loadPage()]);
    }
  }

  async retryJob() {
    const job = this.job;
    if (!job?.state) return;
    const ok = await confirmAction({
      title: `Retry job ${job.id}?`,
      text: `Job ${job.id} (${job.kind}) is ${job.state}. Retrying makes it available to run now, ` +
        'with its attempts reset to 0.',
      ok: 'Retry',
      danger: false,
    });
    if (!ok) return;
    await this.act(this.detail.retry, async () => {
      try {
        const answer = await callAdmin('RetryJobs', { ids: [job.id] });
        const outcome = (answer.outcomes ?? []).find((o) => String(o.id) === String(job.id))?.outcome;
        if (outcome === 'ok') this.showDetailOk(`Job ${job.id} was retried: it is pending again.`);
        else {
          const why = OUTCOMES[outcome] ?? outcome ?? 'the answer has no outcome for it';
          this.showDetailError(`Job ${job.id} was not retried: ${why}`);
        }
      } catch (err) {
        this.showDetailError(`Could not retry job ${job.id}: ${errorText(err)}`);
      }
    });
  }

  async cancelJob() {
    const job = this.job;
    if (!job?.state) return;
    const ok = await confirmAction({
      title: `Cancel job ${job.id}?`,
      text: `Job ${job.id} (${job.kind}) is ${job.state === 'available' ? 'pending' : job.state}. ` +
        'Cancelling stops it from running (a running attempt is not interrupted, its result is dropped). ' +
        'It can be retried later.',
      ok: 'Cancel job',
      back: 'Keep job',
    });
    if (!ok) return;
    await this.act(this.detail.cancel, async () => {
      try {
        const answer = await callAdmin('CancelJob', { id: job.id });
        if (answer.job) this.renderDetail(answer.job);
        this.showDetailOk(`Job ${job.id} was cancelled.`);
      } catch (err) {
        this.showDetailError(`Could not cancel job ${job.id}: ${errorText(err)}`);
      }
    });
  }

  // Every failed job of the queue, a batch per call, following the cursor
  // until the server says done.
  async retryAllFailed() {
    const queue = this.route.queue;
    const failed = toNumber(this.queueInfo()?.failed);
    this.bulkError.hidden = true;
    const ok = await confirmAction({
      title: `Retry all failed jobs of ${queue}?`,
      text: `All ${formatCount(failed)} failed job${failed === 1 ? '' : 's'} of ${queue} ${failed === 1 ? 'becomes' : 'become'} available to run ` +
        `now, with their attempts reset to 0 (in batches of ${BULK_BATCH}).`,
      ok: 'Retry all',
      danger: false,
    });
    if (!ok) return;
    this.bulkRunning = true;
    this.renderHeader();
    let total = 0;
    let batches = 0;
    let afterId = '0';
    const status = (text) => {
      setText(this.bulkStatus, text);
      this.bulkStatus.hidden = false;
    };
    status(`Retrying the failed jobs of ${queue}…`);
    try {
      do {
        const answer = await callAdmin('RetryJobs', { queue, state: 'failed', afterId, limit: BULK_BATCH });
        batches += 1;
        total += toNumber(answer.retried);
        afterId = String(answer.nextAfterId ?? '0');
        if (afterId !== '0') {
          status(`Retrying the failed jobs of ${queue}: ${formatCount(total)} so far (batch ${batches})…`);
        }
      } while (afterId !== '0');
      status(`Retried ${formatCount(total)} failed job${total === 1 ? '' : 's'} of ${queue} ` +
        `in ${batches} batch${batches === 1 ? '' : 'es'}.`);
    } catch (err) {
      status(`Retried ${formatCount(total)} failed jobs of ${queue} before the error below.`);
      setText(this.bulkError, `Bulk retry of ${queue} stopped: ${errorText(err)}`);
      this.bulkError.hidden = false;
    } finally {
      this.bulkRunning = false;
      this.renderHeader();
      await this.loadPage();
    }
  }
}
