// The only script of the inbox and the operators' page. A person's signing key is made in this
// browser by WebCrypto as a non-extractable key and kept in this origin's IndexedDB: script here
// (this one, or any other that ever ran in the origin) can ask the browser to sign with it, but
// cannot read it, so it can be neither sent nor copied. Only its public half leaves the browser,
// for an operator to enrol in the approver directory.
const inbox = (() => {
  const toHex = (b) => Array.from(new Uint8Array(b)).map((x) => x.toString(16).padStart(2, '0')).join('');
  const fromB64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  // This origin's key store: one object store, a person's id to their key.
  const db = () => new Promise((ok, fail) => {
    const open = indexedDB.open('interlock-keys', 1);
    open.onupgradeneeded = () => open.result.createObjectStore('keys');
    open.onsuccess = () => ok(open.result);
    open.onerror = () => fail(open.error);
    open.onblocked = () => fail(new Error('the key store is held by another tab of this page: close it and try again'));
  });
  const inStore = async (mode, act) => {
    const d = await db();
    return new Promise((ok, fail) => {
      const tx = d.transaction('keys', mode);
      const r = act(tx.objectStore('keys'));
      tx.oncomplete = () => ok(r.result);
      tx.onerror = () => fail(tx.error);
    });
  };
  const storedKey = (who) => inStore('readonly', (s) => s.get(who));
  // A new key for `who`, made here: its private half can never be read out, not even by this
  // script. Its public half, in hex, is what the directory holds.
  const makeKey = async (who) => {
    const pair = await crypto.subtle.generateKey({ name: 'Ed25519' }, false, ['sign', 'verify']);
    const publicHex = toHex(await crypto.subtle.exportKey('raw', pair.publicKey));
    await inStore('readwrite', (s) => s.put({ privateKey: pair.privateKey, publicHex }, who));
    return publicHex;
  };
  const keyOf = async (who) => {
    const k = await storedKey(who);
    if (!k) throw new Error(`this browser holds no key for ${who}: make one on the sign-in page and have an operator enrol it`);
    return k.privateKey;
  };
  const signedIn = () => {
    const who = document.getElementById('who');
    if (!who) throw new Error('not signed in: sign in again');
    return who.textContent.trim();
  };
  const sign = async (who, bytes) => toHex(await crypto.subtle.sign({ name: 'Ed25519' }, await keyOf(who), bytes));
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
      const enrol = document.getElementById('enrol');
      const approver = () => {
        const id = document.getElementById('approver').value.trim();
        if (!id) throw new Error('give your id in the directory');
        return id;
      };
      // The public key to enrol, and the directory entry an operator adds for it.
      const show = (who, publicHex, made) => {
        document.getElementById('public-key').textContent = publicHex;
        document.getElementById('entry').textContent = JSON.stringify({ [who]: { public_key: publicHex } });
        document.getElementById('enrol-note').textContent = made
          ? `A new key for ${who} was made in this browser. Give its public key to an operator to put in the approver directory; then sign in.`
          : `This browser already holds a key for ${who}; its public key is below.`;
        enrol.hidden = false;
      };
      document.getElementById('make-key').addEventListener('click', async () => {
        error.textContent = '';
        try {
          const who = approver();
          const held = await storedKey(who);
          if (held) show(who, held.publicHex, false);
          else show(who, await makeKey(who), true);
        } catch (e) {
          error.textContent = e.message;
        }
      });
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        error.textContent = '';
        try {
          const who = approver();
          await keyOf(who);
          const r = await fetch('/login/challenge?approver=' + encodeURIComponent(who));
          const c = await r.json();
          if (!r.ok) throw new Error(c.error);
          const bytes = new TextEncoder().encode(`interlock-inbox-login-v1\n${c.nonce}\n${who}`);
          await post('/login', { approver: who, nonce: c.nonce, signature: await sign(who, bytes) });
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
          const who = signedIn();
          const draft = await post(`/request/${request}/statement`, { csrf, n: Number(n) });
          const bytes = fromB64(draft.bytes);
          checkStatement(bytes, button.dataset);
          const signature = await sign(who, bytes);
          const done = await post(`/request/${request}/approve`, { csrf, draft: draft.draft, signature });
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
          const who = signedIn();
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
          const signature = await sign(who, bytes);
          const done = await post(`/effect/${key}/settle`, { csrf, draft: draft.draft, signature });
          location.href = `/effect/${key}?done=` + encodeURIComponent(done.message);
        } catch (e) {
          result.className = 'error';
          result.textContent = e.message;
        }
      });
    },
  };
})();

document.addEventListener('DOMContentLoaded', () => {
  if (document.getElementById('login')) inbox.loginForm();
  if (document.getElementById('approve')) inbox.approveButton();
  if (document.getElementById('settle-form')) inbox.settleForm();
});
