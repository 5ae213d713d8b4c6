// The only script of the inbox and the operators' page: the person's key is used here, in the
// browser, and never sent.
const inbox = (() => {
  const fromHex = (s) => {
    if (!/^([0-9a-fA-F]{2})*$/.test(s)) throw new Error('the key must be hex digits');
    return new Uint8Array((s.match(/../g) || []).map((h) => parseInt(h, 16)));
  };
  const toHex = (b) => Array.from(new Uint8Array(b)).map((x) => x.toString(16).padStart(2, '0')).join('');
  const fromB64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  // An Ed25519 private key in PKCS#8: a fixed prefix, then the 32-byte seed.
  const keyFrom = async (seedHex) => {
    const seed = fromHex(seedHex.trim());
    if (seed.length !== 32) throw new Error('a key is 64 hex digits (32 bytes)');
    const pkcs8 = new Uint8Array(48);
    pkcs8.set(fromHex('302e020100300506032b657004220420'));
    pkcs8.set(seed, 16);
    return crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']);
  };
  const post = async (url, body) => {
    const r = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const answer = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
    if (!r.ok) throw new Error(answer.error || `HTTP ${r.status}`);
    return answer;
  };
  // Sign nothing but what this page shows: the statement's request, group, level and payload
  // must be the page's, whatever the server sent.
  const checkStatement = (bytes, shown) => {
    const text = new TextDecoder().decode(bytes);
    const prefix = 'interlock-approval-v1\n';
    if (!text.startsWith(prefix)) throw new Error('the inbox sent something that is not an approval: not signed');
    const st = JSON.parse(text.slice(prefix.length));
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    const problems = [];
    if (st.request !== shown.requestId) problems.push(`request ${st.request}`);
    if (st.group !== shown.group) problems.push(`group ${st.group}`);
    if (String(st.level) !== shown.level) problems.push(`level ${st.level}`);
    if (!same(st.payload, JSON.parse(shown.payload))) problems.push(`payload ${JSON.stringify(st.payload)}`);
    if (problems.length) throw new Error(`the statement to sign is not what this page shows (${problems.join(', ')}): not signed`);
  };
  return {
    loginForm() {
      const form = document.getElementById('login');
      const error = document.getElementById('error');
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        error.textContent = '';
        try {
          const approver = document.getElementById('approver').value.trim();
          const seed = document.getElementById('key').value.trim();
          const key = await keyFrom(seed);
          const r = await fetch('/login/challenge?approver=' + encodeURIComponent(approver));
          const c = await r.json();
          if (!r.ok) throw new Error(c.error);
          const bytes = new TextEncoder().encode(`interlock-inbox-login-v1\n${c.nonce}\n${approver}`);
          const sig = await crypto.subtle.sign({ name: 'Ed25519' }, key, bytes);
          await post('/login', { approver, nonce: c.nonce, signature: toHex(sig) });
          sessionStorage.setItem('interlock-key', seed);
          location.href = '/';
        } catch (e) {
          error.textContent = e.message;
        }
      });
    },
    approveButton() {
      const button = document.getElementById('approve');
      const result = document.getElementById('result');
      button.addEventListener('click', async () => {
        result.className = '';
        result.textContent = 'signing…';
        try {
          const { request, n, csrf } = button.dataset;
          const seed = sessionStorage.getItem('interlock-key');
          if (!seed) throw new Error('your key is kept only in the tab you signed in with: sign in again');
          const draft = await post(`/request/${request}/statement`, { csrf, n: Number(n) });
          const bytes = fromB64(draft.bytes);
          checkStatement(bytes, button.dataset);
          const sig = await crypto.subtle.sign({ name: 'Ed25519' }, await keyFrom(seed), bytes);
          const done = await post(`/request/${request}/approve`, { csrf, draft: draft.draft, signature: toHex(sig) });
          location.href = '/?done=' + encodeURIComponent(done.message);
        } catch (e) {
          result.className = 'error';
          result.textContent = e.message;
        }
      });
    },
    settleForm() {
      const form = document.getElementById('settle-form');
      const result = document.getElementById('result');
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        result.className = '';
        result.textContent = 'signing…';
        try {
          const { key, keyId, person, csrf } = form.dataset;
          const chosen = form.querySelector('input[name=finding]:checked');
          if (!chosen) throw new Error('say what you found: applied (with its reference) or not applied');
          const finding = chosen.value;
          const reference = document.getElementById('reference').value.trim();
          const note = document.getElementById('note').value;
          const looked = document.getElementById('looked').value.trim();
          if (!looked) throw new Error('say when you looked at the target: now, or the time in ms since the epoch');
          const seed = sessionStorage.getItem('interlock-key');
          if (!seed) throw new Error('your key is kept only in the tab you signed in with: sign in again');
          const draft = await post(`/effect/${key}/statement`, { csrf, finding, reference, note, looked });
          const bytes = fromB64(draft.bytes);
          // Sign nothing but what this form says, for this effect, in this person's name.
          const text = new TextDecoder().decode(bytes);
          const prefix = 'interlock-settlement-v1\n';
          if (!text.startsWith(prefix)) throw new Error('the server sent something that is not a settlement: not signed');
          const st = JSON.parse(text.slice(prefix.length));
          const problems = [];
          if (st.effect !== keyId) problems.push(`effect ${st.effect}`);
          if (st.person !== person) problems.push(`person ${st.person}`);
          if (st.note !== note) problems.push(`note ${st.note}`);
          if (!st.finding || st.finding.found !== finding) problems.push(`finding ${JSON.stringify(st.finding)}`);
          if (finding === 'applied' && st.finding.reference !== reference) problems.push(`reference ${st.finding.reference}`);
          // The time of the look is the person's word: exactly what was typed, or, for `now`,
          // this browser's clock within two minutes.
          const lookedOk = looked === 'now'
            ? Math.abs(st.looked_ms - Date.now()) <= 120000
            : String(st.looked_ms) === looked;
          if (!lookedOk) problems.push(`looked at ${st.looked_ms}`);
          if (problems.length) throw new Error(`the statement to sign is not what this form says (${problems.join(', ')}): not signed`);
          const sig = await crypto.subtle.sign({ name: 'Ed25519' }, await keyFrom(seed), bytes);
          const done = await post(`/effect/${key}/settle`, { csrf, draft: draft.draft, signature: toHex(sig) });
          location.href = `/effect/${key}?done=` + encodeURIComponent(done.message);
        } catch (e) {
          result.className = 'error';
          result.textContent = e.message;
        }
      });
    },
    signOutForm() {
      // The key leaves this tab with the session.
      document.getElementById('sign-out-form').addEventListener('submit', () => {
        sessionStorage.removeItem('interlock-key');
      });
    },
  };
})();

document.addEventListener('DOMContentLoaded', () => {
  if (document.getElementById('login')) inbox.loginForm();
  if (document.getElementById('approve')) inbox.approveButton();
  if (document.getElementById('settle-form')) inbox.settleForm();
  if (document.getElementById('sign-out-form')) inbox.signOutForm();
});
