// The admin-token prompt: a modal that only closes with a token, since no
// call can succeed without one. Everyone who asks while it is open gets the
// token it is closed with.

export function createTokenPrompt() {
  const dialog = document.getElementById('token-dialog');
  const form = document.getElementById('token-form');
  const input = document.getElementById('token-input');
  const error = document.getElementById('token-error');
  let waiting = [];

  dialog.addEventListener('cancel', (event) => event.preventDefault());
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (token === '') {
      error.textContent = 'Enter the admin token.';
      input.setAttribute('aria-invalid', 'true');
      input.focus();
      return;
    }
    input.value = '';
    input.removeAttribute('aria-invalid');
    error.textContent = '';
    dialog.close();
    const resolvers = waiting;
    waiting = [];
    for (const resolve of resolvers) resolve(token);
  });

  return (message) => new Promise((resolve) => {
    waiting.push(resolve);
    // A second caller with no news keeps the first one's message.
    if (message || !dialog.open) {
      error.textContent = message ?? '';
      if (message) input.setAttribute('aria-invalid', 'true');
    }
    if (!dialog.open) dialog.showModal();
    input.focus();
  });
}
