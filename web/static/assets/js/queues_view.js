// The Queues tab: a row per queue (counts, the oldest pending job's age, the
// effective limit and its source, throttled count, a small dispatches/s
// chart; the name links to the queue's jobs), a warning per queue with jobs
// of kinds no consumer serves, and a large chart of the selected queue
// against its limit.

import { el, setText, syncRows } from './dom.js';
import { formatAge, formatCount, formatLimit, formatMeasured, formatRate, formatTimestamp, toNumber } from './format.js';
import { limitRate } from './history.js';
import { createSparkline, renderChart, renderSparkline } from './chart.js';
import { jobsHash } from './route.js';

const SELECTED_KEY = 'conveyor.chartQueue';
const SOURCES = new Set(['override', 'queue-config', 'default', 'none', 'disabled', 'backoff']);

// The limit's source as shown: a backoff (the downstream asked to wait) with
// the time it ends.
export function sourceText(limit) {
  const source = limit?.source ?? 'none';
  if (source === 'backoff' && limit.backoffUntil) return `backoff until ${formatTimestamp(limit.backoffUntil)}`;
  return source;
}

// The badge, and for a hold the answer that set it (status, start of the body).
export function sourceBadge(limit) {
  const source = limit?.source ?? 'none';
  const known = SOURCES.has(source) ? source : 'none';
  const badge = el('span', { class: `badge badge-${known}`, text: sourceText(limit) });
  if (source !== 'backoff' || !limit.backoffReason) return [badge];
  badge.title = `The downstream asked to wait: ${limit.backoffReason}`;
  return [badge, el('span', { class: 'hold-reason', text: limit.backoffReason })];
}

// What the source cell shows, to tell when it must be redrawn.
function sourceKey(limit) {
  return `${sourceText(limit)}|${limit?.source === 'backoff' ? limit.backoffReason ?? '' : ''}`;
}

// Where the chart says the most: the most throttled queue, else the first
// with a limit, else the first.
function defaultChartQueue(queues) {
  let best = null;
  for (const q of queues) {
    if (toNumber(q.throttled) > 0 && (!best || toNumber(q.throttled) > toNumber(best.throttled))) best = q;
  }
  best ??= queues.find((q) => limitRate(q.limit) !== null) ?? queues[0];
  return best?.queue ?? null;
}

export class QueuesView {
  // history: DispatchHistory; onPause(queue, pause) pauses or resumes.
  constructor(history, onPause) {
    this.history = history;
    this.onPause = onPause;
    this.tbody = document.querySelector('#queues-table tbody');
    this.empty = document.getElementById('queues-empty');
    this.select = document.getElementById('chart-queue');
    this.chart = document.getElementById('chart');
    this.summary = document.getElementById('chart-summary');
    this.warnings = document.getElementById('unserved-warnings');
    this.warningsKey = '';
    this.selected = sessionStorage.getItem(SELECTED_KEY);
    this.queues = [];
    this.throttledBefore = new Map();
    this.now = 0;
    this.select.addEventListener('change', () => this.choose(this.select.value));
    new ResizeObserver(() => this.drawChart()).observe(this.chart);
  }

  choose(queue) {
    this.selected = queue;
    sessionStorage.setItem(SELECTED_KEY, queue);
    this.render(this.queues, this.now);
  }

  render(queues, now) {
    this.queues = queues;
    this.now = now;
    this.empty.hidden = queues.length > 0;
    this.tbody.closest('.table-wrap').hidden = queues.length === 0;
    const names = queues.map((q) => q.queue);
    if (!names.includes(this.selected)) this.selected = defaultChartQueue(queues);
    this.renderSelect(names);
    syncRows(this.tbody, queues, (q) => q.queue, (q) => this.createRow(q), (row, q) => this.updateRow(row, q));
    for (const q of queues) this.throttledBefore.set(q.queue, toNumber(q.throttled));
    this.renderWarnings(queues);
    this.drawChart();
  }

  // One line per queue holding jobs that nothing here will run.
  renderWarnings(queues) {
    const lines = [];
    for (const q of queues) {
      const kinds = (q.unservedKinds ?? []).filter((k) => toNumber(k.pending) > 0);
      if (kinds.length === 0) continue;
      const list = kinds.map((k) => `${k.kind} (${formatCount(k.pending)} pending)`).join(', ');
      lines.push({ queue: q.queue, text: `no consumer serves kind${kinds.length > 1 ? 's' : ''} ${list}` });
    }
    const key = JSON.stringify(lines);
    if (key === this.warningsKey) return;
    this.warningsKey = key;
    this.warnings.replaceChildren(...lines.map((l) => el('li', { dataset: { queue: l.queue } },
      el('strong', { text: l.queue }), `: ${l.text}`)));
    this.warnings.hidden = lines.length === 0;
  }

  renderSelect(names) {
    const current = [...this.select.options].map((o) => o.value);
    if (current.join('\n') !== names.join('\n')) {
      this.select.replaceChildren(...names.map((n) => el('option', { value: n, text: n })));
    }
    this.select.disabled = names.length === 0;
    if (this.selected !== null) this.select.value = this.selected;
  }

  createRow(q) {
    const cell = (field, label, cls) => el('td', { class: cls, dataset: { field, label } });
    const row = el('tr', {},
      cell('queue', 'Queue', 'title-cell'),
      cell('pending', 'Pending', 'num'),
      cell('oldest', 'Oldest pending', 'num'),
      cell('running', 'Running', 'num'),
      cell('scheduled', 'Scheduled', 'num'),
      cell('completed', 'Completed', 'num'),
      cell('failed', 'Failed', 'num'),
      cell('limit', 'Limit'),
      cell('source', 'Source'),
      cell('throttled', 'Throttled', 'num'),
      cell('rate', 'Dispatches/s'),
      cell('actions', 'Actions', 'actions-cell'));
    const name = el('a', { class: 'queue-name', href: jobsHash({ queue: q.queue }),
                           title: `Jobs of ${q.queue}` });
    const paused = el('span', { class: 'badge badge-paused', text: 'paused', hidden: true });
    const throttling = el('span', { class: 'badge badge-throttled', text: 'throttled', hidden: true,
                                    title: 'Dispatch was deferred on the limit since the last update' });
    const field = (f) => row.querySelector(`td[data-field="${f}"]`);
    field('queue').append(name, paused, throttling);
    // The small chart is a button: it puts this queue on the big chart.
    const spark = el('button', { type: 'button', class: 'spark-button', 'aria-label': `Chart ${q.queue}`,
                                 title: 'Show on the chart above', onclick: () => this.choose(q.queue) },
                     createSparkline());
    const now = el('span', { class: 'rate-now' });
    field('rate').append(el('div', { class: 'rate-cell' }, spark, now));
    const pause = el('button', { type: 'button', class: 'small', dataset: { action: 'pause' } });
    pause.addEventListener('click', async () => {
      pause.disabled = true;
      try {
        await this.onPause(q.queue, pause.dataset.paused !== 'true');
      } finally {
        pause.disabled = false;
      }
    });
    // A backpressure hold ends at once when the operator resumes the queue.
    const endHold = el('button', { type: 'button', class: 'small', hidden: true, dataset: { action: 'end-hold' },
                                   text: 'End hold', 'aria-label': `End the hold of ${q.queue}`,
                                   title: 'Dispatch again now, before the downstream\'s delay ends' });
    endHold.addEventListener('click', async () => {
      endHold.disabled = true;
      try {
        await this.onPause(q.queue, false);
      } finally {
        endHold.disabled = false;
      }
    });
    field('actions').append(el('div', { class: 'row-actions' }, pause, endHold));
    return row;
  }

  updateRow(row, q) {
    const field = (f) => row.querySelector(`td[data-field="${f}"]`);
    const nameCell = field('queue');
    setText(nameCell.querySelector('.queue-name'), q.queue);
    nameCell.querySelector('.badge-paused').hidden = !q.paused;
    const before = this.throttledBefore.get(q.queue);
    nameCell.querySelector('.badge-throttled').hidden =
      before === undefined || toNumber(q.throttled) <= before;
    setText(field('pending'), formatCount(q.pending));
    setText(field('oldest'), toNumber(q.pending) > 0 ? formatAge(q.oldestPendingAgeSeconds) : '–');
    setText(field('running'), formatCount(q.running));
    setText(field('scheduled'), formatCount(q.scheduled));
    setText(field('completed'), formatCount(q.completed));
    setText(field('failed'), formatCount(q.failed));
    setText(field('limit'), formatLimit(q.limit));
    const sourceCell = field('source');
    if (sourceCell.dataset.key !== sourceKey(q.limit)) {
      sourceCell.dataset.key = sourceKey(q.limit);
      sourceCell.replaceChildren(...sourceBadge(q.limit));
    }
    row.querySelector('[data-action="end-hold"]').hidden = q.limit?.source !== 'backoff';
    setText(field('throttled'), formatCount(q.throttled));
    const points = this.history.points(q.queue);
    renderSparkline(row.querySelector('.spark'), points, this.now, limitRate(q.limit));
    setText(row.querySelector('.rate-now'), formatMeasured(this.history.current(q.queue)));
    const pause = row.querySelector('[data-action="pause"]');
    pause.dataset.paused = String(Boolean(q.paused));
    setText(pause, q.paused ? 'Resume' : 'Pause');
    pause.setAttribute('aria-label', `${q.paused ? 'Resume' : 'Pause'} ${q.queue}`);
    row.classList.toggle('selected', q.queue === this.selected);
  }

  drawChart() {
    const q = this.queues.find((item) => item.queue === this.selected);
    if (!q) {
      this.chart.replaceChildren();
      this.chart.setAttribute('aria-label', 'No queue to chart');
      this.summary.textContent = '';
      return;
    }
    const limit = limitRate(q.limit);
    renderChart(this.chart, this.history.points(q.queue), this.now, limit);
    const current = this.history.current(q.queue);
    const peak = this.history.peak(q.queue);
    const held = q.limit?.source === 'backoff' && q.limit.backoffReason ? `: ${q.limit.backoffReason}` : '';
    const source = sourceText(q.limit) + held;
    const limitText = limit === null ? `no limit (${source})` : `limit ${formatRate(limit)} (${source})`;
    this.summary.replaceChildren(
      el('strong', { text: q.queue }), `: ${formatMeasured(current)} now, peak ${formatMeasured(peak)} in the last minute, `,
      `${limitText}; ${formatCount(q.pending)} pending, ${formatCount(q.throttled)} throttled.`);
    this.chart.setAttribute('aria-label',
      `Dispatches per second of ${q.queue}: ${formatMeasured(current)} now against ${limitText}`);
  }
}
