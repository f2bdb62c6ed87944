// Calls to Conveyor's AdminService (and TaskService.GetJob) over the Connect
// protocol (unary, JSON).
// The admin token, when the server wants one, is asked for once and kept in
// sessionStorage: it lives as long as this browser tab's session.

const TOKEN_KEY = 'conveyor.adminToken';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;  // HTTP status; 0 when the server could not be reached
    this.code = code;      // Connect code: "invalid_argument", "not_found", ...
  }
}

let promptForToken = null;

// prompt(message) resolves with a token the user entered; message says why
// it is asked again (null the first time). Calls made while it is open
// share it.
export function setTokenPrompt(prompt) {
  promptForToken = prompt;
}

async function askForToken(message) {
  if (!promptForToken) throw new ApiError(401, 'unauthenticated', 'an admin token is required');
  sessionStorage.setItem(TOKEN_KEY, await promptForToken(message));
}

async function readError(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // Not a Connect error body (a proxy's page, say): describe the status.
  }
  const code = body && typeof body.code === 'string' ? body.code : 'unknown';
  const message = body && typeof body.message === 'string' && body.message !== ''
    ? body.message
    : `HTTP ${response.status} ${response.statusText}`.trim();
  return new ApiError(response.status, code, message);
}

export function callAdmin(method, request = {}) {
  return call('AdminService', method, request);
}

// The same server and token: the task API's reads (GetJob).
export function callTask(method, request = {}) {
  return call('TaskService', method, request);
}

async function call(service, method, request) {
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' };
    if (token !== null) headers.Authorization = `Bearer ${token}`;
    let response;
    try {
      response = await fetch(`/conveyor.v1.${service}/${method}`, {
        method: 'POST',
        headers,
        body: JSON.stringify(request),
        cache: 'no-store',
      });
    } catch (err) {
      throw new ApiError(0, 'unavailable', `no answer from the Conveyor server (${err.message})`);
    }
    if (response.status === 401) {
      const error = await readError(response);
      const current = sessionStorage.getItem(TOKEN_KEY);
      // Another call already got a new token while this one was in flight.
      if (current !== null && current !== token) continue;
      sessionStorage.removeItem(TOKEN_KEY);
      await askForToken(token === null ? null : `The server rejected that token: ${error.message}`);
      continue;
    }
    if (!response.ok) throw await readError(response);
    const text = await response.text();
    return text === '' ? {} : JSON.parse(text);
  }
}
