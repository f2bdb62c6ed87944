// The Keys card of a queue's view (the Jobs tab): the queue's busiest keys
// from ListKeys (ready jobs per key from storage; running and throttled from
// this server's dispatch; each key's limit with its source, and its weight),
// and the per-key limit with its source. Clicking a
// key shows that key's jobs: the API has no key filter, so the job list
// filters its page in the browser (jobs_view.js).

import { callAdmin } from './api.js';
import { el, setText, syncRows } from './dom.js';
import { formatCount, formatLimit, formatRate, toNumber, truncate } from './format.js';

const KEYS_SHOWN = 20;

function errorText(err) {
  return err.code && err.code !== 'unknown' ? `${err.message} (${err.code})` : err.message;
}

// "5/s · burst 10 per key · at most 2 running per key", or "none".
function keyLimitText(limit) {
  const parts = [];
  if (limit?.ratePerSec !== undefined && limit?.ratePerSec !== null) {
    const fleet = limit.scope === 'fleet' ? ' · fleet-wide' : '';
    parts.push(`${formatRate(limit.ratePerSec)} · burst ${toNumber(limit.burst)} per key${fleet}`);
  }
  if (limit?.maxWorkers !== undefined && limit?.maxWorkers !== null) {
    parts.push(`at most ${toNumber(limit.maxWorkers)} running per key`);
  }
  return parts.length ? parts.join(' · ') : 'none';
}

export class KeysPanel {
  // select(key): the user picked key (a string, '' for the empty key) or
  // null (every key).
  constructor(select) {
    this.select = select;
    this.card = document.getElementById('keys-card');
    this.title = document.getElementById('keys-title');
    this.tbody = document.getElementById('keys-table').querySelector('tbody');
    this.empty = document.getElementById('keys-empty');
    this.error = document.getElementById('keys-error');
    this.limit = document.getElementById('keys-limit');
    this.clear = document.getElementById('keys-clear');
    this.queue = '';
    this.key = null;
    this.seq = 0;
    this.loading = null;
    this.clear.addEventListener('click', () => this.select(null));
  }

  // The queue and the key filter of the view.
  show(queue, key) {
    const changed = queue !== this.queue;
    this.queue = queue;
    this.key = key;
    this.clear.hidden = key === null;
    for (const row of this.tbody.rows) this.updateRow(row, row.item);
    if (changed) {
      this.card.hidden = true;
      this.tbody.replaceChildren();
      this.load();
    }
  }

  poll() {
    return this.loading ?? this.load();
  }

  load() {
    const queue = this.queue;
    if (!queue) return null;
    const seq = ++this.seq;
    const loading = callAdmin('ListKeys', { queue, limit: KEYS_SHOWN }).then((answer) => {
      if (seq !== this.seq) return;
      this.error.hidden = true;
      this.render(answer);
    }, (err) => {
      if (seq !== this.seq) return;
      // A plugin without keys (before ABI 1.4): nothing to show.
      if (err.code === 'unimplemented') {
        this.card.hidden = true;
        return;
      }
      setText(this.error, `Could not list the keys of ${queue}: ${errorText(err)}`);
      this.error.hidden = false;
    }).finally(() => {
      if (this.loading === loading) this.loading = null;
    });
    this.loading = loading;
    return loading;
  }

  render(answer) {
    const keys = answer.keys ?? [];
    const limit = answer.limit ?? {};
    // Shown for a queue that uses keys: a job with a key, a per-key limit, or
    // a key with a limit or weight of its own (every job of another queue has
    // the empty key).
    const setting = (k) => (k.limitSource && k.limitSource !== 'none' && k.limitSource !== 'disabled') ||
      toNumber(k.weight) > 1;
    const keyed = keys.some((k) => k.key || setting(k)) || (limit.source && limit.source !== 'none') ||
      this.key !== null;
    this.card.hidden = !keyed;
    if (!keyed) return;
    const total = toNumber(answer.totalKeys);
    setText(this.title, `Keys of ${this.queue}`);
    this.tbody.closest('.table-wrap').hidden = keys.length === 0;
    this.empty.hidden = keys.length > 0;
    setText(this.empty, 'No key has ready or running jobs now.');
    syncRows(this.tbody, keys, (k) => `k:${k.key ?? ''}`, (k) => this.createRow(k), (row, k) => this.updateRow(row, k));
    const shown = total > keys.length ? `The ${keys.length} busiest of ${formatCount(total)} keys. ` : '';
    setText(this.limit, `${shown}Key limit: ${keyLimitText(limit)} (source: ${limit.source ?? 'none'}); ` +
      `fairness: ${answer.fairness ?? 'fair'}.`);
  }

  createRow() {
    const cell = (field, label, cls) => el('td', { class: cls, dataset: { field, label } });
    const row = el('tr', { class: 'clickable' },
      cell('key', 'Key', 'key-cell title-cell'),
      cell('ready', 'Ready', 'num'),
      cell('running', 'Running', 'num'),
      cell('throttled', 'Throttled'),
      cell('limit', 'Limit'),
      cell('source', 'Source'),
      cell('weight', 'Weight', 'num'));
    row.cells[0].append(el('button', { type: 'button', class: 'link key-link' }));
    row.addEventListener('click', () => this.select(row.item.key ?? ''));
    return row;
  }

  updateRow(row, k) {
    row.item = k;
    const key = k.key ?? '';
    const [keyCell, readyCell, runningCell, throttledCell, limitCell, sourceCell, weightCell] = row.cells;
    const button = keyCell.firstElementChild;
    setText(button, key ? truncate(key, 40) : '(empty key)');
    button.classList.toggle('muted', !key);
    button.setAttribute('aria-label', `Show the jobs of key ${key || '(empty key)'}`);
    if (key) keyCell.title = key;
    else keyCell.removeAttribute('title');
    setText(readyCell, `${formatCount(k.ready)}${k.readyCapped ? '+' : ''}`);
    setText(runningCell, formatCount(k.running));
    setText(throttledCell, k.throttled ? 'yes' : 'no');
    throttledCell.classList.toggle('muted', !k.throttled);
    // A server that predates them sends no source and no weight.
    const source = k.limitSource || 'none';
    setText(limitCell, formatLimit(k.limit));
    limitCell.classList.toggle('muted', !k.limit);
    setText(sourceCell, source);
    sourceCell.classList.toggle('muted', source === 'none');
    const weight = toNumber(k.weight) || 1;
    setText(weightCell, formatCount(weight));
    weightCell.classList.toggle('muted', weight === 1);
    row.classList.toggle('selected', this.key !== null && key === this.key);
  }
}
