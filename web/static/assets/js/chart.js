// A hand-written SVG line chart: dispatches/s (solid) against the limit
// (dashed, a step line so a changed limit shows where it changed).

import { WINDOW_MS } from './history.js';

const SVG_NS = 'http://www.w3.org/2000/svg';

// The smallest of 1, 2, 2.5, 5 times a power of ten that is >= value.
function niceCeil(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (step * power >= value * (1 - 1e-9)) return step * power;
  }
  return 10 * power;
}

function yTop(points, currentLimit) {
  let top = currentLimit ?? 0;
  for (const p of points) {
    if (p.rate !== null) top = Math.max(top, p.rate);
    if (p.limit !== null) top = Math.max(top, p.limit);
  }
  return niceCeil(top * 1.15);
}

function fmtTick(v) {
  if (v >= 1000) return `${+(v / 1000).toFixed(1)}k`;
  return String(+v.toFixed(2));
}

// The rate as polyline segments, split where a sample is missing.
function rateSegments(points, x, y) {
  const segments = [];
  let current = [];
  for (const p of points) {
    if (p.rate === null) {
      if (current.length) segments.push(current);
      current = [];
    } else {
      current.push([x(p.t), y(p.rate)]);
    }
  }
  if (current.length) segments.push(current);
  return segments;
}

// The limit as horizontal steps; unlimited stretches are left out.
function limitSegments(points, x, y, x0, x1, currentLimit) {
  if (points.length === 0) {
    return currentLimit === null ? [] : [[[x0, y(currentLimit)], [x1, y(currentLimit)]]];
  }
  const segments = [];
  let current = [];
  let previousX = x0;  // the first limit is drawn from the left edge
  for (const p of points) {
    const px = x(p.t);
    if (p.limit === null) {
      if (current.length) segments.push(current);
      current = [];
    } else {
      const py = y(p.limit);
      // Flat at the old level up to this sample, then a step to the new one.
      current.push(current.length === 0 ? [previousX, py] : [px, current[current.length - 1][1]]);
      current.push([px, py]);
    }
    previousX = px;
  }
  if (current.length) {
    current.push([x1, current[current.length - 1][1]]);
    segments.push(current);
  }
  return segments;
}

const pathOf = (segment) =>
  segment.map(([px, py], i) => `${i ? 'L' : 'M'}${px.toFixed(1)},${py.toFixed(1)}`).join('');

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// container: an element with a size. now: the latest sample's time.
export function renderChart(container, points, now, currentLimit) {
  const width = Math.max(container.clientWidth, 200);
  const height = Math.max(container.clientHeight, 120);
  const m = { left: 46, right: 14, top: 14, bottom: 24 };
  const x0 = m.left;
  const x1 = width - m.right;
  const yBase = height - m.bottom;
  const top = yTop(points, currentLimit);
  const x = (t) => x0 + ((t - (now - WINDOW_MS)) / WINDOW_MS) * (x1 - x0);
  const y = (v) => yBase - (v / top) * (yBase - m.top);
  const visible = points.filter((p) => p.t >= now - WINDOW_MS);

  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, 'aria-hidden': 'true' });
  const grid = svg('g', { class: 'grid' });
  const axis = svg('g', { class: 'axis' });
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    grid.append(svg('line', { x1: x0, x2: x1, y1: y(v), y2: y(v) }));
    axis.append(svg('text', { x: x0 - 6, y: y(v) + 4, 'text-anchor': 'end' }, fmtTick(v)));
  }
  for (const [seconds, anchor] of [[60, 'start'], [30, 'middle'], [0, 'end']]) {
    const label = seconds === 0 ? 'now' : `-${seconds}s`;
    axis.append(svg('text', { x: x(now - seconds * 1000), y: height - 6, 'text-anchor': anchor }, label));
  }
  root.append(grid, axis);

  for (const segment of rateSegments(visible, x, y)) {
    if (segment.length > 1) {
      const first = segment[0];
      const last = segment[segment.length - 1];
      const area = `${pathOf(segment)}L${last[0].toFixed(1)},${yBase}L${first[0].toFixed(1)},${yBase}Z`;
      root.append(svg('path', { class: 'area', d: area }));
    }
    root.append(svg('path', { class: 'rate', d: pathOf(segment) }));
    if (segment.length === 1) {
      root.append(svg('circle', { class: 'rate', cx: segment[0][0], cy: segment[0][1], r: 2 }));
    }
  }
  for (const segment of limitSegments(visible, x, y, x0, x1, currentLimit)) {
    root.append(svg('path', { class: 'limit', d: pathOf(segment) }));
  }
  if (currentLimit !== null) {
    root.append(svg('text', { class: 'limit-label', x: x1, y: y(currentLimit) - 5, 'text-anchor': 'end' },
                    `limit ${fmtTick(currentLimit)}/s`));
  }
  if (visible.every((p) => p.rate === null)) {
    // On a plate, so the limit line does not run through the words.
    const cx = (x0 + x1) / 2;
    const cy = m.top + (yBase - m.top) * 0.3;
    root.append(svg('rect', { class: 'plate', x: cx - 110, y: cy - 14, width: 220, height: 22, rx: 4 }));
    root.append(svg('text', { class: 'placeholder', x: cx, y: cy + 2, 'text-anchor': 'middle' },
                    'measuring… (needs two samples)'));
  }
  container.replaceChildren(root);
}

// A row's small chart: the same lines without axes, in a fixed 120x30 box.
export function renderSparkline(node, points, now, currentLimit) {
  const w = 120;
  const h = 30;
  const top = yTop(points, currentLimit);
  const x = (t) => ((t - (now - WINDOW_MS)) / WINDOW_MS) * w;
  const y = (v) => h - 2 - (v / top) * (h - 4);
  const visible = points.filter((p) => p.t >= now - WINDOW_MS);
  const children = [];
  for (const segment of limitSegments(visible, x, y, 0, w, currentLimit)) {
    children.push(svg('path', { class: 'limit', d: pathOf(segment) }));
  }
  for (const segment of rateSegments(visible, x, y)) {
    children.push(svg('path', { class: 'rate', d: pathOf(segment) }));
  }
  node.replaceChildren(...children);
}

export function createSparkline() {
  return svg('svg', { class: 'spark', viewBox: '0 0 120 30', preserveAspectRatio: 'none', 'aria-hidden': 'true' });
}
