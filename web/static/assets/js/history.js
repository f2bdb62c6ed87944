// Dispatches per second per queue, from successive `dispatched` counters
// (conveyor_jobs_dispatched_total of the server) and the effective limit at
// each sample, kept for the chart's window.

import { toNumber } from './format.js';

export const WINDOW_MS = 60_000;
// Samples further apart than this (the tab was hidden, the server was away)
// leave a gap instead of one long average.
const GAP_MS = 5_000;

export function limitRate(limit) {
  if (!limit || limit.ratePerSec === undefined || limit.ratePerSec === null) return null;
  return Number(limit.ratePerSec);
}

export class DispatchHistory {
  constructor() {
    this.queues = new Map();  // name -> {last: {t, dispatched}, points: [{t, rate, limit}]}
  }

  // queues: ListQueues entries; now: when the answer arrived (ms, monotonic).
  record(queues, now) {
    const seen = new Set();
    for (const q of queues) {
      seen.add(q.queue);
      const dispatched = toNumber(q.dispatched);
      const limit = limitRate(q.limit);
      let entry = this.queues.get(q.queue);
      if (!entry) {
        entry = { last: null, points: [] };
        this.queues.set(q.queue, entry);
      }
      const last = entry.last;
      if (last) {
        const dt = now - last.t;
        // A smaller counter means the server restarted: start over there.
        const usable = dt > 0 && dt <= GAP_MS && dispatched >= last.dispatched;
        const rate = usable ? ((dispatched - last.dispatched) * 1000) / dt : null;
        entry.points.push({ t: now, rate, limit });
      }
      entry.last = { t: now, dispatched };
      const oldest = now - WINDOW_MS - GAP_MS;
      while (entry.points.length > 0 && entry.points[0].t < oldest) entry.points.shift();
    }
    for (const name of [...this.queues.keys()]) {
      if (!seen.has(name)) this.queues.delete(name);
    }
  }

  points(queue) {
    return this.queues.get(queue)?.points ?? [];
  }

  // The latest measured rate, or null before two samples.
  current(queue) {
    const points = this.points(queue);
    for (let i = points.length - 1; i >= 0; i--) {
      if (points[i].rate !== null) return points[i].rate;
    }
    return null;
  }

  // The highest rate seen in the window, or null.
  peak(queue) {
    let peak = null;
    for (const p of this.points(queue)) {
      if (p.rate !== null && (peak === null || p.rate > peak)) peak = p.rate;
    }
    return peak;
  }
}
