// The dashboard: tabs, a 1-second poll of ListQueues and ListRateLimits
// (paused while the browser tab is hidden), and the two views.

import { callAdmin, setTokenPrompt } from './api.js';
import { DispatchHistory } from './history.js';
import { LimitsView } from './limits_view.js';
import { QueuesView } from './queues_view.js';
import { createTokenPrompt } from './token_dialog.js';

const POLL_MS = 1000;

function setupTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const select = (tab, focus) => {
    for (const t of tabs) {
      const selected = t === tab;
      t.setAttribute('aria-selected', String(selected));
      t.tabIndex = selected ? 0 : -1;
      document.getElementById(t.getAttribute('aria-controls')).hidden = !selected;
    }
    if (focus) tab.focus();
  };
  const fromHash = () => {
    const name = location.hash.replace('#', '') || 'queues';
    select(tabs.find((t) => t.id === `tab-${name}`) ?? tabs[0], false);
  };
  for (const tab of tabs) {
    tab.addEventListener('click', () => {
      history.replaceState(null, '', `#${tab.id.replace('tab-', '')}`);
      select(tab, false);
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
  constructor(queuesView, limitsView) {
    this.queuesView = queuesView;
    this.limitsView = limitsView;
    this.history = queuesView.history;
    this.timer = null;
    this.inFlight = null;
    this.queued = null;
    this.status = document.getElementById('conn-status');
    this.banner = document.getElementById('conn-banner');
    this.killSwitch = document.getElementById('killswitch-banner');
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
      const [queues, limits] = await Promise.all([callAdmin('ListQueues'), callAdmin('ListRateLimits')]);
      const now = performance.now();
      const list = queues.queues ?? [];
      this.history.record(list, now);
      this.queuesView.render(list, now);
      this.limitsView.render(limits, list);
      this.killSwitch.hidden = limits.enabled === true;
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
  setupTabs();
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
    setLimit: (queue, ratePerSec, burst) => callAdmin('SetQueueRateLimit', { queue, ratePerSec, burst }),
    deleteLimit: (queue) => callAdmin('DeleteQueueRateLimit', { queue }),
  }, refresh);
  poller = new Poller(queuesView, limitsView);
  poller.refresh();
}

main();
