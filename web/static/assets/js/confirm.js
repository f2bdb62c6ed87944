// The confirmation dialog (#confirm-dialog): one question at a time, resolved
// true only by its confirm button (ok); Escape and the other button (back)
// resolve false.

export function confirmAction({ title, text, ok, back = 'Cancel', danger = true }) {
  const dialog = document.getElementById('confirm-dialog');
  const okButton = document.getElementById('confirm-ok');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  okButton.textContent = ok;
  document.getElementById('confirm-cancel').textContent = back;
  okButton.className = danger ? 'danger' : 'primary';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'confirm'), { once: true });
    dialog.returnValue = '';
    dialog.showModal();
    document.getElementById('confirm-cancel').focus();
  });
}
