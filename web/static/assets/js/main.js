// The dashboard: tabs routed by the URL hash (route.js), a 1-second poll of
// ListQueues and ListRateLimits, and of the jobs shown (paused while the
// browser tab is hidden), and the three views.

import { callAdmin, setTokenPrompt } from './api.js';
import { DispatchHistory } from './history.js';
import { JobsView } from './jobs_view.js';
import { LimitsView } from './limits_view.js';
import { QueuesView } from './queues_view.js';
import { parseHash } from './route.js';
import { createTokenPrompt } from './token_dialog.js';

const POLL_MS = 1000;

// The Jobs tab returns to the queue and filters it last showed; the others
// are plain names. Tab clicks rewrite the entry (no history step per tab);
// links (a queue's name, a job) add one.
function setupTabs(jobsView) {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const select = (tab) => {
    for (const t of tabs) {
      const selected = t === tab;
      t.setAttribute('aria-selected', String(selected));
      t.tabIndex = selected ? 0 : -1;
      document.getElementById(t.getAttribute('aria-controls')).hidden = !selected;
    }
  };
  const fromHash = () => {
    const route = parseHash(location.hash);
    const tab = tabs.find((t) => t.id === `tab-${route.tab}`) ?? tabs[0];
    select(tab);
    if (tab.id === 'tab-jobs') jobsView.show(route);
    else jobsView.hide();
  };
  for (const tab of tabs) {
    tab.addEventListener('click', () => {
      const name = tab.id.replace('tab-', '');
      history.replaceState(null, '', name === 'jobs' ? jobsView.hash() : `#${name}`);
      fromHash();
    });
    tab.addEventListener('keydown', (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (!step) return;
      const next = tabs[(tabs.indexOf(tab) + step + tabs.length) % tabs.length];
      next.click();
      next.focus();
    });
  }
  window.addEventListener('hashchange', fromHash);
  fromHash();
}

class Poller {
  constructor(queuesView, limitsView, jobsView) {
    this.queuesView = queuesView;
    this.limitsView = limitsView;
    this.jobsView = jobsView;
    this.history = queuesView.history;
    this.timer = null;
    this.inFlight = null;
    this.queued = null;
    this.status = document.getElementById('conn-status');
    this.banner = document.getElementById('conn-banner');
    this.killSwitch = document.getElementById('killswitch-banner');
    this.killSwitchSource = document.getElementById('killswitch-banner-source');
    document.addEventListener('visibilitychange', () => {
      if (document.hidden) this.stop();
      else this.refresh();
    });
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
  }

  // Fetches now and schedules the next. A fetch already under way may have
  // left before the change that asks for this one: fetch once more after it.
  refresh() {
    if (this.inFlight) {
      this.queued ??= this.inFlight.then(() => {
        this.queued = null;
        return this.refresh();
      });
      return this.queued;
    }
    this.stop();
    this.inFlight = this.fetch().finally(() => {
      this.inFlight = null;
      if (!document.hidden) this.timer = setTimeout(() => this.refresh(), POLL_MS);
    });
    return this.inFlight;
  }

  async fetch() {
    try {
      // The jobs view reports its own errors: a failed ListJobs is not a lost server.
      const [queues, limits] = await Promise.all([callAdmin('ListQueues'), callAdmin('ListRateLimits'),
        this.jobsView.poll()]);
      const now = performance.now();
      const list = queues.queues ?? [];
      this.history.record(list, now);
      this.queuesView.render(list, now);
      this.limitsView.render(limits, list);
      this.jobsView.render(list);
      this.killSwitch.hidden = limits.enabled === true;
      this.killSwitchSource.textContent = limits.enabledSource === 'storage'
        ? 'The kill switch is on (stored: every process on this storage follows it)'
        : 'The kill switch is on ([engine] rate_limit_enabled = false in the config file)';
      this.banner.hidden = true;
      this.status.dataset.state = 'live';
      this.status.textContent = `live · ${new Date().toLocaleTimeString([], { hour12: false })}`;
    } catch (err) {
      this.banner.textContent = `Cannot load the dashboard's data: ${err.message}. Retrying every second; the figures below are from the last answer.`;
      this.banner.hidden = false;
      this.status.dataset.state = 'error';
      this.status.textContent = 'disconnected';
    }
  }
}

function main() {
  setTokenPrompt(createTokenPrompt());
  const jobsView = new JobsView();
  setupTabs(jobsView);
  let poller = null;
  const refresh = () => poller.refresh();
  const history = new DispatchHistory();
  const queuesView = new QueuesView(history, async (queue, pause) => {
    const error = document.getElementById('queues-error');
    error.hidden = true;
    try {
      await callAdmin(pause ? 'PauseQueue' : 'ResumeQueue', { queue });
    } catch (err) {
      error.textContent = `Could not ${pause ? 'pause' : 'resume'} ${queue}: ${err.message}`;
      error.hidden = false;
    }
    await refresh();
  });
  const limitsView = new LimitsView({
    setLimit: (queue, ratePerSec, burst, scope) => callAdmin('SetQueueRateLimit', { queue, ratePerSec, burst, scope }),
    deleteLimit: (queue) => callAdmin('DeleteQueueRateLimit', { queue }),
    // The kill switch: always an explicit JSON boolean (the server refuses a
    // request without one, and JSON.stringify drops an undefined field).
    setEnabled: (enabled) => (typeof enabled === 'boolean'
      ? callAdmin('SetRateLimitingEnabled', { enabled })
      : Promise.reject(new TypeError(`enabled must be true or false, got ${String(enabled)}`))),
  }, refresh);
  poller = new Poller(queuesView, limitsView, jobsView);
  poller.refresh();
}

main();
