// The dashboard's place in the URL hash, so every view is linkable and the
// back button works:
//   #queues   #limits   #jobs/<queue>?state=<state>&kind=<kind>&key=<key>&job=<id>
// (key present, even empty: only that key's jobs; absent: every key's).

function decode(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;  // a hand-typed "%": take it as it is
  }
}

export function parseHash(hash) {
  const text = hash.replace(/^#/, '');
  const q = text.indexOf('?');
  const path = q < 0 ? text : text.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : text.slice(q + 1));
  const slash = path.indexOf('/');
  const tab = (slash < 0 ? path : path.slice(0, slash)) || 'queues';
  const job = params.get('job') ?? '';
  return {
    tab,
    queue: slash < 0 ? '' : decode(path.slice(slash + 1)),
    state: params.get('state') ?? '',
    kind: params.get('kind') ?? '',
    key: params.has('key') ? params.get('key') : null,
    // Ids stay strings: int64 is a string in the API's JSON.
    job: /^[1-9][0-9]{0,18}$/.test(job) ? job : null,
  };
}

export function jobsHash({ queue = '', state = '', kind = '', key = null, job = null }) {
  const params = new URLSearchParams();
  if (state) params.set('state', state);
  if (kind) params.set('kind', kind);
  if (key !== null && key !== undefined) params.set('key', key);
  if (job) params.set('job', job);
  const query = params.toString();
  return `#jobs${queue ? `/${encodeURIComponent(queue)}` : ''}${query ? `?${query}` : ''}`;
}

// push: a new history entry (the back button returns here); otherwise this
// entry is rewritten. Either way the views follow the hash.
export function navigate(hash, { push = false } = {}) {
  if (hash === location.hash) return;
  if (push) {
    location.hash = hash;  // fires hashchange
  } else {
    history.replaceState(null, '', hash);
    window.dispatchEvent(new HashChangeEvent('hashchange'));
  }
}
