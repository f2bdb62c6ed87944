// The checks the server makes (core/src/validation.cc), repeated here for
// instant feedback. The server stays the judge: its message is shown when it
// rejects something these let through.

const QUEUE_NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
export const MAX_BURST = 4294967295;
const QUEUE_RULE = 'use 1-128 characters from A-Z a-z 0-9 . _ : - starting with a letter or digit';

// Text in double quotes as the server quotes it, cut after 64 characters.
function quote(text) {
  const shown = text.length > 64 ? `${text.slice(0, 64)}...` : text;
  return `"${shown.replace(/["\\]/g, '\\$&')}"`;
}

// Each returns {value} or {error}.
export function checkQueue(text) {
  if (text === '') return { error: `Enter a queue name: ${QUEUE_RULE}` };
  if (!QUEUE_NAME.test(text)) {
    const length = text.length > 128 ? ` (${text.length} characters)` : '';
    return { error: `invalid queue name ${quote(text)}${length}: ${QUEUE_RULE}` };
  }
  return { value: text };
}

const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

export function checkRate(text) {
  const trimmed = text.trim();
  if (trimmed === '') return { error: 'Enter a rate: jobs per second, a number greater than 0' };
  if (!DECIMAL.test(trimmed)) {
    return { error: `rate must be a finite number greater than 0, got ${quote(trimmed)}` };
  }
  const rate = Number(trimmed);
  if (!Number.isFinite(rate) || !(rate > 0)) {
    const shown = Number.isFinite(rate) ? String(rate) : 'inf';
    return { error: `rate must be a finite number greater than 0, got ${shown}` };
  }
  return { value: rate };
}

// ceil(rate), at least 1, at most MAX_BURST: what the CLI uses without --burst.
export function autoBurst(rate) {
  if (!(rate > 1)) return 1;
  return Math.min(Math.ceil(rate), MAX_BURST);
}

// Empty burst means ceil(rate), as in `conveyor ratelimit set` without --burst.
export function checkBurst(text, rate) {
  const trimmed = text.trim();
  if (trimmed === '') return { value: rate === undefined ? undefined : autoBurst(rate), auto: true };
  const rule = `burst must be a whole number from 1 to ${MAX_BURST}`;
  if (!/^[+-]?\d+$/.test(trimmed)) return { error: `${rule}, got ${quote(trimmed)}` };
  const burst = Number(trimmed);
  if (burst < 1 || burst > MAX_BURST) return { error: `${rule}, got ${trimmed.replace(/^\+/, '')}` };
  return { value: burst };
}

// A limit's scope: "process" (each process has its own bucket) or "fleet"
// (one bucket per queue shared by every process on the same storage).
export const SCOPES = ['process', 'fleet'];
export function checkScope(text) {
  if (SCOPES.includes(text)) return { value: text };
  return { error: `scope must be process or fleet, got ${quote(text)}` };
}
