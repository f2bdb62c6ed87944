// The Limits tab: the override editor (queue, rate, burst, scope) with the
// API's validation, the table of overrides with edit and remove, the key
// settings (each key's own limit, every key's, weights; read only), the
// global default, and the kill switch: its state, where it comes from, and a
// confirmed control that flips it.

import { confirmAction } from './confirm.js';
import { el, setText, syncRows } from './dom.js';
import { formatLimit, formatRate, formatScope, formatTimestamp, toNumber } from './format.js';
import { checkBurst, checkQueue, checkRate, checkScope } from './validate.js';

const COMPLAINT_DELAY_MS = 500;

export class LimitsView {
  // api: {setLimit(queue, rate, burst, scope), deleteLimit(queue),
  // setEnabled(enabled)} returning promises; refresh(): fetches fresh data
  // after a change.
  constructor(api, refresh) {
    this.api = api;
    this.refresh = refresh;
    this.form = document.getElementById('limit-form');
    this.title = document.getElementById('limit-form-title');
    this.fields = {
      queue: this.field('limit-queue', (v) => checkQueue(v)),
      rate: this.field('limit-rate', (v) => checkRate(v)),
      burst: this.field('limit-burst', (v) => checkBurst(v, checkRate(this.fields.rate.input.value).value)),
      scope: this.field('limit-scope', (v) => checkScope(v)),
    };
    this.formError = document.getElementById('limit-form-error');
    this.formOk = document.getElementById('limit-form-ok');
    this.save = document.getElementById('limit-save');
    this.cancel = document.getElementById('limit-cancel');
    this.tbody = document.querySelector('#overrides-table tbody');
    this.empty = document.getElementById('overrides-empty');
    this.ignored = document.getElementById('overrides-ignored');
    this.tableError = document.getElementById('overrides-error');
    this.keyRows = document.querySelector('#key-settings-table tbody');
    this.keyEmpty = document.getElementById('key-settings-empty');
    this.keyIgnored = document.getElementById('key-settings-ignored');
    this.knownQueues = document.getElementById('known-queues');
    this.enabled = document.getElementById('global-enabled');
    this.enabledSource = document.getElementById('global-enabled-source');
    this.defaultLimit = document.getElementById('global-default');
    this.toggle = document.getElementById('killswitch-toggle');
    this.toggleError = document.getElementById('killswitch-error');
    this.switchState = null;  // {enabled, source} of the last answer
    this.editing = null;

    // A pending complaint must not shift the layout between press and release.
    this.save.addEventListener('pointerdown', () => {
      for (const f of Object.values(this.fields)) clearTimeout(f.timer);
    });
    this.form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.submit();
    });
    this.cancel.addEventListener('click', () => this.stopEditing());
    this.toggle.addEventListener('click', () => this.flipSwitch());
  }

  // A form field that checks itself as the user types. A fix shows at once;
  // a complaint waits until typing pauses, so it neither nags mid-word nor
  // moves the Save button under a pointer that is on its way to it.
  field(id, check) {
    const input = document.getElementById(id);
    const error = document.getElementById(`${id}-error`);
    const f = { input, error, check, timer: null };
    input.addEventListener('input', () => {
      this.formOk.hidden = true;
      this.recheck(f);
      // The burst's meaning depends on the rate ("empty: ceil(rate)").
      if (f === this.fields.rate && this.fields.burst.input.value !== '') this.recheck(this.fields.burst);
    });
    return f;
  }

  recheck(f) {
    clearTimeout(f.timer);
    if (!f.check(f.input.value).error) this.show(f);
    else f.timer = setTimeout(() => this.show(f), COMPLAINT_DELAY_MS);
  }

  show(f) {
    const result = f.check(f.input.value);
    setText(f.error, result.error ?? '');
    if (result.error) f.input.setAttribute('aria-invalid', 'true');
    else f.input.removeAttribute('aria-invalid');
    return result;
  }

  async submit() {
    this.formError.hidden = true;
    this.formOk.hidden = true;
    const results = {};
    let firstInvalid = null;
    for (const [name, f] of Object.entries(this.fields)) {
      clearTimeout(f.timer);
      results[name] = this.show(f);
      if (results[name].error && !firstInvalid) firstInvalid = f.input;
    }
    if (firstInvalid) {
      firstInvalid.focus();
      return;
    }
    const queue = results.queue.value;
    const rate = results.rate.value;
    const burst = results.burst.value;
    const scope = results.scope.value;
    this.save.disabled = true;
    try {
      await this.api.setLimit(queue, rate, burst, scope);
    } catch (err) {
      // The server's own words: it is the judge of what is valid and allowed.
      setText(this.formError, `The server did not save the limit: ${err.message}`);
      this.formError.hidden = false;
      return;
    } finally {
      this.save.disabled = false;
    }
    this.stopEditing();
    setText(this.formOk, `queue ${queue} limited to ${formatRate(rate)} (burst ${burst}), ${formatScope(scope)}`);
    this.formOk.hidden = false;
    await this.refresh();
  }

  startEditing(override) {
    this.editing = override.queue;
    this.clearForm();
    this.fields.queue.input.value = override.queue;
    this.fields.queue.input.readOnly = true;
    this.fields.rate.input.value = String(Number(override.ratePerSec));
    this.fields.burst.input.value = String(toNumber(override.burst));
    this.fields.scope.input.value = override.scope === 'fleet' ? 'fleet' : 'process';
    setText(this.title, `Edit limit of ${override.queue}`);
    this.cancel.hidden = false;
    this.form.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
    this.fields.rate.input.focus();
    this.fields.rate.input.select();
  }

  stopEditing() {
    this.editing = null;
    this.fields.queue.input.readOnly = false;
    setText(this.title, 'Set a queue limit');
    this.cancel.hidden = true;
    this.clearForm();
  }

  clearForm() {
    for (const f of Object.values(this.fields)) {
      clearTimeout(f.timer);
      f.input.value = f === this.fields.scope ? 'process' : '';
      setText(f.error, '');
      f.input.removeAttribute('aria-invalid');
    }
    this.formError.hidden = true;
    this.formOk.hidden = true;
  }

  async remove(queue) {
    this.tableError.hidden = true;
    const confirmed = await confirmAction({
      title: 'Remove override?',
      text: `Remove the rate-limit override of ${queue}? The queue goes back to its config-file limit, ` +
        'the global default, or none.',
      ok: 'Remove',
    });
    if (!confirmed) return;
    try {
      await this.api.deleteLimit(queue);
    } catch (err) {
      setText(this.tableError, `Could not remove the override of ${queue}: ${err.message}`);
      this.tableError.hidden = false;
      return;
    }
    if (this.editing === queue) this.stopEditing();
    await this.refresh();
  }

  // The kill switch, after a confirmation that says what it does everywhere.
  async flipSwitch() {
    if (!this.switchState) return;
    this.toggleError.hidden = true;
    const enable = !this.switchState.enabled;
    const confirmed = await confirmAction(enable
      ? {
        title: 'Enable rate limiting?',
        text: 'Every queue\'s limit applies again, in every process on this storage, within a second.',
        ok: 'Enable',
        danger: false,
      }
      : {
        title: 'Disable rate limiting?',
        text: 'No limit throttles any queue, in every process on this storage, within a second ' +
          '(backpressure holds still apply). Overrides are kept. The setting is stored: it stays ' +
          'until rate limiting is enabled again, across restarts.',
        ok: 'Disable',
      });
    if (!confirmed) return;
    this.toggle.disabled = true;
    try {
      await this.api.setEnabled(enable);
    } catch (err) {
      setText(this.toggleError, `Could not ${enable ? 'enable' : 'disable'} rate limiting: ${err.message}`);
      this.toggleError.hidden = false;
      return;
    } finally {
      this.toggle.disabled = false;
    }
    await this.refresh();
  }

  renderSwitch(enabled, source) {
    this.switchState = { enabled, source };
    this.enabled.replaceChildren(enabled
      ? el('span', { class: 'state-enabled', text: 'enabled' })
      : el('span', { class: 'state-disabled', text: 'DISABLED (kill switch): every queue is unlimited' }));
    setText(this.enabledSource, source === 'storage'
      ? 'storage: the kill switch (this button, conveyor ratelimit disable/enable), followed by every process'
      : 'config file: [engine] rate_limit_enabled (nothing stored)');
    this.toggle.hidden = false;
    setText(this.toggle, enabled ? 'Disable rate limiting' : 'Enable rate limiting');
    this.toggle.className = enabled ? 'danger' : 'primary';
  }

  // limits: ListRateLimits answer; queues: ListQueues entries (for the queue list).
  render(limits, queues) {
    const overrides = limits.overrides ?? [];
    this.empty.hidden = overrides.length > 0;
    this.tbody.closest('.table-wrap').hidden = overrides.length === 0;
    syncRows(this.tbody, overrides, (o) => o.queue, (o) => this.createRow(o), (row, o) => this.updateRow(row, o));

    const enabled = limits.enabled === true;
    this.ignored.hidden = enabled || overrides.length === 0;
    this.renderKeySettings(limits.keySettings ?? [], enabled);
    this.renderSwitch(enabled, limits.enabledSource === 'storage' ? 'storage' : 'config');
    const def = limits.defaultLimit;
    setText(this.defaultLimit, def ? formatLimit(def) : 'none');

    const names = queues.map((q) => q.queue);
    const current = [...this.knownQueues.options].map((o) => o.value);
    if (current.join('\n') !== names.join('\n')) {
      this.knownQueues.replaceChildren(...names.map((n) => el('option', { value: n })));
    }
  }

  createRow(o) {
    const cell = (field, label, cls) => el('td', { class: cls, dataset: { field, label } });
    const row = el('tr', {},
      cell('queue', 'Queue', 'title-cell'),
      cell('rate', 'Rate (jobs/s)', 'num'),
      cell('burst', 'Burst', 'num'),
      cell('scope', 'Scope'),
      cell('updated', 'Updated'),
      cell('actions', 'Actions', 'actions-cell'));
    row.cells[0].append(el('span', { class: 'queue-name' }));
    const edit = el('button', { type: 'button', class: 'small', text: 'Edit', 'aria-label': `Edit ${o.queue}`,
                                dataset: { action: 'edit' } });
    edit.addEventListener('click', () => this.startEditing(row.override));
    const remove = el('button', { type: 'button', class: 'small', text: 'Remove',
                                  'aria-label': `Remove ${o.queue}`, dataset: { action: 'remove' } });
    remove.addEventListener('click', () => this.remove(o.queue));
    row.cells[5].append(el('div', { class: 'row-actions' }, edit, remove));
    return row;
  }

  // One row per stored key setting, in the API's order (queue, every key
  // first, then key order). A row's key: "q:" + queue, then "*" for every
  // key or "k:" + the key.
  renderKeySettings(settings, enabled) {
    this.keyEmpty.hidden = settings.length > 0;
    this.keyRows.closest('.table-wrap').hidden = settings.length === 0;
    this.keyIgnored.hidden = enabled || !settings.some((k) => k.limit);
    const rowKey = (k) => `q:${k.queue}\n${k.key === undefined ? '*' : `k:${k.key}`}`;
    const cell = (field, label, cls) => el('td', { class: cls, dataset: { field, label } });
    syncRows(this.keyRows, settings, rowKey,
      () => el('tr', {},
        cell('queue', 'Queue', 'title-cell'),
        cell('key', 'Key'),
        cell('limit', 'Limit'),
        cell('weight', 'Weight', 'num'),
        cell('updated', 'Updated')),
      (row, k) => {
        setText(row.cells[0], k.queue);
        row.cells[1].replaceChildren(k.key === undefined
          ? el('em', { text: 'every key' })
          : el('span', { class: 'key-name', text: k.key === '' ? '(empty key)' : k.key }));
        setText(row.cells[2], k.limit ? formatLimit(k.limit) : '—');
        setText(row.cells[3], k.weight === undefined ? '—' : String(k.weight));
        setText(row.cells[4], formatTimestamp(k.updatedAt));
      });
  }

  updateRow(row, o) {
    row.override = o;
    setText(row.cells[0].firstElementChild, o.queue);
    setText(row.cells[1], String(Number(o.ratePerSec)));
    setText(row.cells[2], String(toNumber(o.burst)));
    setText(row.cells[3], formatScope(o.scope));
    row.cells[3].classList.toggle('scope-fleet', o.scope === 'fleet');
    setText(row.cells[4], formatTimestamp(o.updatedAt));
  }
}
