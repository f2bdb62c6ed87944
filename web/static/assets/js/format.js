// How numbers, limits and times read on the dashboard.

const counts = new Intl.NumberFormat('en-US');

// int64/uint64 arrive as JSON strings (proto3 JSON); absent means 0.
export function toNumber(value) {
  if (value === undefined || value === null || value === '') return 0;
  const n = Number(value);
  return Number.isFinite(n) ? n : 0;
}

export function formatCount(value) {
  return counts.format(toNumber(value));
}

// A rate as the user typed it: shortest exact text ("0.5", "50", "2.5").
export function formatRate(rate) {
  return `${String(Number(rate))}/s`;
}

// A measured rate: one decimal below 100, whole numbers above.
export function formatMeasured(rate) {
  if (rate === null || rate === undefined || !Number.isFinite(rate)) return '–';
  return rate >= 100 ? `${Math.round(rate)}/s` : `${rate.toFixed(1)}/s`;
}

// A limit's scope: whose bucket it fills ("process" or "fleet"; absent from
// a server that predates scopes: per process).
export function formatScope(scope) {
  return scope === 'fleet' ? 'fleet-wide' : 'per process';
}

export function formatLimit(limit) {
  if (!limit || limit.ratePerSec === undefined || limit.ratePerSec === null) return 'unlimited';
  const burst = limit.burst === undefined ? '' : ` · burst ${toNumber(limit.burst)}`;
  return `${formatRate(limit.ratePerSec)}${burst} · ${formatScope(limit.scope)}`;
}

// RFC 3339 → "2024-05-01 12:03:04 UTC" (sortable, unambiguous for operators).
export function formatTimestamp(text) {
  if (!text) return '–';
  const date = new Date(text);
  if (Number.isNaN(date.getTime())) return text;
  return `${date.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

// An age in seconds → "45 s", "12 min", "3.5 h", "2.1 d"; "–" for none.
export function formatAge(seconds) {
  const s = Number(seconds);
  if (!Number.isFinite(s) || s <= 0) return '–';
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

// The first line of text, cut to max characters with an ellipsis.
export function truncate(text, max) {
  const all = String(text ?? '');
  const line = all.split('\n', 1)[0];
  if (line.length > max) return `${line.slice(0, max - 1)}…`;
  return line.length < all.length ? `${line}…` : line;
}
