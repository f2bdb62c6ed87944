// Small DOM helpers: build elements and keep table rows in place across
// refreshes, so a focused button or a half-typed edit survives each poll.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

export function setText(node, text) {
  const value = String(text);
  if (node.textContent !== value) node.textContent = value;
}

// Makes tbody hold one row per item, in the items' order. create(item) builds
// a new row; update(row, item) refreshes it. Rows are keyed by key(item) and
// reused, never rebuilt while their item stays.
export function syncRows(tbody, items, key, create, update) {
  const existing = new Map();
  for (const row of tbody.rows) existing.set(row.dataset.key, row);
  let cursor = tbody.firstElementChild;
  for (const item of items) {
    const k = key(item);
    let row = existing.get(k);
    if (row) {
      existing.delete(k);
    } else {
      row = create(item);
      row.dataset.key = k;
    }
    update(row, item);
    if (row !== cursor) tbody.insertBefore(row, cursor);
    else cursor = cursor.nextElementSibling;
  }
  for (const row of existing.values()) row.remove();
}
