// tools/console/web/app.js: the factum console (docs/console.md), a page of plain JavaScript over
// the public HTTP API, with the API key the user gives (kept in sessionStorage, sent as
// X-API-Key to this origin only). Views by location hash: #/entities, #/entity/TYPE/ID/TAB
// (facts, dead-letters, breakers, alarms, keys, economics) and #/cluster. The DOM is built with
// textContent only (nothing the server answers is parsed as HTML). Runs on the browser's one
// thread; a live follow reads the fact stream (GET .../facts/stream) with fetch, because
// EventSource cannot send the key.
'use strict';
(() => {
  const KEY = 'factum.console.key';
  const ZERO_HASH = '0'.repeat(64);
  let key = sessionStorage.getItem(KEY);
  let follow = null; // the live follow: {ctl: AbortController}

  // -- DOM helpers --

  const $ = (sel, root = document) => root.querySelector(sel);
  function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const setStatus = (msg) => { $('#status').textContent = msg; };
  const main = () => $('#main');
  const when = (ms) => (ms ? new Date(ms).toISOString().replace('T', ' ').replace('Z', ' UTC') : '');
  const enc = encodeURIComponent;

  /// A table: columns [label, (row) => cell content], rows; `rowAttrs(row)` adds attributes.
  function table(caption, columns, rows, rowAttrs = () => ({})) {
    return el('table', {},
      el('caption', { class: 'hint', text: caption }),
      el('thead', {}, el('tr', {}, columns.map(([label]) => el('th', { scope: 'col', text: label })))),
      el('tbody', {}, rows.map((r) => el('tr', rowAttrs(r),
        columns.map(([, get, cls]) => el('td', { class: cls }, get(r)))))));
  }

  // -- the API --

  async function api(method, path, body) {
    const headers = { 'X-API-Key': key };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let r;
    try {
      r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      return { status: 0, ok: false, json: null, text: String(e), link: null };
    }
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
    return { status: r.status, ok: r.ok, json, text, link: r.headers.get('Link') };
  }
  function problem(r) {
    if (r.status === 0) return 'the server cannot be reached: ' + r.text;
    const p = r.json && typeof r.json === 'object' ? r.json : {};
    return `${r.status} ${p.code || ''}${p.detail ? ': ' + p.detail : ''}`;
  }
  /// The query of a Link header's rel="next" target, or null.
  function nextQuery(link) {
    const m = link && /<([^>]*)>\s*;\s*rel="next"/.exec(link);
    if (!m) return null;
    const q = m[1].indexOf('?');
    return q < 0 ? '' : m[1].slice(q + 1);
  }

  // -- the hash chain (docs/storage-format.md, section 7) --

  /// The elements of a JSON array's text, each as its own text.
  function splitArray(text) {
    const out = [];
    let depth = 0, inStr = false, start = -1;
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (inStr) {
        if (c === '\\') i++;
        else if (c === '"') inStr = false;
        continue;
      }
      if (c === '"') inStr = true;
      else if (c === '{' || c === '[') {
        if (++depth === 2) start = i;
      } else if (c === '}' || c === ']') {
        if (--depth === 1 && start >= 0) { out.push(text.slice(start, i + 1)); start = -1; }
      }
    }
    return out;
  }
  /// A fact's JSON view without its "hash" member: its canonical serialization.
  function canonical(raw) {
    let depth = 0, inStr = false;
    for (let i = 0; i < raw.length; i++) {
      const c = raw[i];
      if (inStr) {
        if (c === '\\') i++;
        else if (c === '"') inStr = false;
        continue;
      }
      if (c === '"') {
        if (depth === 1 && raw[i - 1] === ',' && raw.startsWith('"hash":"', i)) {
          const end = raw.indexOf('"', i + 8);
          return raw.slice(0, i - 1) + raw.slice(end + 1);
        }
        inStr = true;
      } else if (c === '{' || c === '[') depth++;
      else if (c === '}' || c === ']') depth--;
    }
    return null;
  }
  async function sha256hex(text) {
    const d = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
    return Array.from(new Uint8Array(d), (b) => b.toString(16).padStart(2, '0')).join('');
  }
  /// Checks each row's hash and the links between consecutive seqs; [{seq, ok, why}].
  async function verifyRows(rows) {
    const out = [];
    for (let i = 0; i < rows.length; i++) {
      const { fact, raw } = rows[i];
      const canon = canonical(raw);
      let why = '';
      if (canon === null) why = 'no hash member';
      else if (await sha256hex(canon) !== fact.hash) why = 'hash does not match the content';
      else if (fact.seq === 1 && fact.prev_hash !== ZERO_HASH) why = 'seq 1 does not link to the genesis hash';
      else if (i > 0 && rows[i - 1].fact.seq === fact.seq - 1 && rows[i - 1].fact.hash !== fact.prev_hash)
        why = `prev_hash is not the hash of seq ${fact.seq - 1}`;
      out.push({ seq: fact.seq, ok: !why, why });
    }
    return out;
  }

  // -- login --

  function showLogin(msg) {
    main().replaceChildren($('#t-login').content.cloneNode(true));
    $('#logout').hidden = true;
    $('#who').textContent = '';
    setStatus(msg || '');
    $('#login-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      key = $('#api-key').value.trim();
      const r = await api('GET', '/v1/entities?limit=1');
      if (r.status === 401 || r.status === 403) {
        key = null;
        return setStatus('That key was refused: ' + problem(r));
      }
      sessionStorage.setItem(KEY, key);
      location.hash = '#/entities';
      route();
    });
    $('#api-key').focus();
  }

  // -- entities --

  async function showEntities(q) {
    const type = q.get('type') || '';
    let order = q.get('order') || 'last_activity';
    const form = el('form', { class: 'fields', id: 'entities-form' },
      el('label', { for: 'e-type' }, 'Type', el('input', { id: 'e-type', name: 'type', value: type })),
      el('label', { for: 'e-order' }, 'Order',
        el('select', { id: 'e-order', name: 'order' },
          el('option', { value: 'last_activity', selected: order === 'last_activity' }, 'last activity, newest first'),
          el('option', { value: 'key', selected: order === 'key' }, 'type and id'))),
      el('button', { type: 'submit', id: 'e-apply' }, 'Show'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      if ($('#e-type').value) p.set('type', $('#e-type').value);
      p.set('order', $('#e-order').value);
      location.hash = '#/entities?' + p;
    });
    const section = el('section', { 'aria-labelledby': 'ent-h' }, el('h2', { id: 'ent-h' }, 'Entities'), form);
    main().replaceChildren(section);
    const p = new URLSearchParams({ limit: '50', order });
    if (type) p.set('type', type);
    if (q.get('after')) p.set('after', q.get('after'));
    let r = await api('GET', '/v1/entities?' + p);
    if (r.status === 501 && order === 'last_activity') { // a server that does not offer that order
      order = 'key';
      p.set('order', 'key');
      p.delete('after');
      r = await api('GET', '/v1/entities?' + p);
      section.append(el('p', { class: 'hint' }, 'This server lists entities by type and id only.'));
    }
    if (!r.ok) return setStatus('Entities: ' + problem(r));
    setStatus(`${r.json.length} entities shown.`);
    section.append(table('Entities of this tenant', [
      ['Type', (e) => e.type],
      ['ID', (e) => el('a', { href: `#/entity/${enc(e.type)}/${enc(e.id)}/facts`, class: 'entity-link' }, e.id)],
      ['Last activity', (e) => (order === 'last_activity' ? when(e.last_activity) || 'unknown' : '')],
      ['Bytes', (e) => String(e.bytes ?? ''), 'num'],
    ], r.json));
    const next = nextQuery(r.link);
    const pager = el('p', { class: 'pager' }, el('a', { href: '#/entities?' + new URLSearchParams({ type, order }) }, 'First page'));
    if (next !== null) {
      const after = new URLSearchParams(next).get('after');
      pager.append(el('a', { href: '#/entities?' + new URLSearchParams({ type, order, after }), id: 'e-next' }, 'Next page'));
    }
    section.append(pager);
  }

  // -- one entity --

  const TABS = [['facts', 'Facts'], ['dead-letters', 'Dead letters'], ['breakers', 'Breakers'],
    ['alarms', 'Alarms'], ['keys', 'Keys'], ['economics', 'Economics']];
  const FILTERS = [['type', 'Fact type'], ['subtype', 'Subtype'], ['trace_id', 'Trace id'],
    ['tool_id', 'Tool'], ['idempotency_key', 'Idempotency key']];
  const TIMES = [['since', 'Since (local time)'], ['until', 'Until (local time)']];
  /// A time in ms as a datetime-local input's value (local time, seconds).
  function localInput(ms) {
    const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
    return d.toISOString().slice(0, 19);
  }

  function entityFrame(type, id, tab) {
    const base = `/v1/entities/${enc(type)}/${enc(id)}`;
    const section = el('section', { 'aria-labelledby': 'entity-h' },
      el('h2', { id: 'entity-h' }, `${type}/${id}`),
      el('nav', { 'aria-label': 'Entity' }, el('ul', { class: 'tabs' }, TABS.map(([t, label]) =>
        el('li', {}, el('a', { href: `#/entity/${enc(type)}/${enc(id)}/${t}`, id: 'tab-' + t,
          'aria-current': t === tab ? 'page' : false }, label))))));
    main().replaceChildren(section);
    return { section, base };
  }

  function factRow(fact, raw) {
    const summary = [fact.trace_id && 'trace ' + fact.trace_id, fact.tool_id && 'tool ' + fact.tool_id,
      fact.amount && `${fact.amount} ${fact.currency}`, fact.idempotency_key && 'key ' + fact.idempotency_key]
      .filter(Boolean).join(', ');
    return el('tr', { 'data-seq': fact.seq },
      el('td', { class: 'num' }, String(fact.seq)),
      el('td', {}, when(fact.timestamp)),
      el('td', {}, fact.type),
      el('td', {}, fact.subtype || ''),
      el('td', {}, summary),
      el('td', {}, el('details', {},
        el('summary', {}, `JSON and chain link of seq ${fact.seq}`),
        el('p', { class: 'chain mono' }, `prev_hash ${fact.prev_hash}`, el('br'), `-> hash ${fact.hash}`),
        el('pre', {}, JSON.stringify(JSON.parse(raw), null, 2)))),
      el('td', { class: 'chain-cell' }, ''));
  }

  async function showFacts(type, id, q) {
    const { section, base } = entityFrame(type, id, 'facts');
    const limit = q.get('limit') || '50';
    const form = el('form', { class: 'fields', id: 'facts-form' },
      FILTERS.map(([name, label]) => el('label', { for: 'f-' + name }, label,
        el('input', { id: 'f-' + name, name, value: q.get(name) || '' }))),
      TIMES.map(([name, label]) => el('label', { for: 'f-' + name }, label,
        el('input', { id: 'f-' + name, name, type: 'datetime-local', step: 1,
          value: q.get(name) ? localInput(Number(q.get(name))) : '' }))),
      el('label', { for: 'f-limit' }, 'Page size', el('input', { id: 'f-limit', name: 'limit', type: 'number', min: 1, max: 1000, value: limit })),
      el('button', { type: 'submit', id: 'f-apply' }, 'Filter'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      for (const [name] of FILTERS) if ($('#f-' + name).value) p.set(name, $('#f-' + name).value);
      for (const [name] of TIMES) if ($('#f-' + name).value) p.set(name, String(new Date($('#f-' + name).value).getTime()));
      p.set('limit', $('#f-limit').value || '50');
      location.hash = `#/entity/${enc(type)}/${enc(id)}/facts?` + p;
    });
    section.append(form);
    const p = new URLSearchParams({ limit });
    for (const [name] of [...FILTERS, ...TIMES]) if (q.get(name)) p.set(name, q.get(name));
    if (q.get('after_seq')) p.set('after_seq', q.get('after_seq'));
    const r = await api('GET', `${base}/facts?` + p);
    if (!r.ok) return setStatus('Facts: ' + problem(r));
    const rows = splitArray(r.text).map((raw) => ({ raw, fact: JSON.parse(raw) }));
    setStatus(rows.length ? `Facts ${rows[0].fact.seq} to ${rows[rows.length - 1].fact.seq} shown.` : 'No facts match.');
    const body = el('tbody', { id: 'facts-body' }, rows.map((x) => factRow(x.fact, x.raw)));
    const tbl = el('table', {}, el('caption', { class: 'hint' }, 'Facts, oldest first; expand a row for its JSON and chain link'),
      el('thead', {}, el('tr', {}, ['Seq', 'Time', 'Type', 'Subtype', 'About', 'Details', 'Chain']
        .map((h) => el('th', { scope: 'col', text: h })))), body);
    const verdict = el('p', { id: 'verify-result', class: 'verdict', role: 'status' });
    const verify = el('button', { type: 'button', id: 'verify' }, 'Verify chain of this page');
    verify.addEventListener('click', async () => {
      if (!window.crypto || !crypto.subtle) {
        verdict.textContent = 'Cannot verify here: the browser offers SHA-256 (crypto.subtle) only on https or localhost pages.';
        return;
      }
      const res = await verifyRows(rows);
      for (const v of res) {
        const cell = body.querySelector(`tr[data-seq="${v.seq}"] .chain-cell`);
        if (cell) cell.textContent = v.ok ? 'ok' : 'BROKEN: ' + v.why;
      }
      const bad = res.filter((v) => !v.ok);
      verdict.textContent = bad.length
        ? `Chain BROKEN at seq ${bad.map((v) => v.seq).join(', ')}.`
        : `Chain verified: ${res.length} facts, every hash recomputed, every link between consecutive seqs matches.`;
    });
    const live = el('p', { id: 'live-state', class: 'live', role: 'status' }, 'Not following.');
    const followBtn = el('button', { type: 'button', id: 'follow', 'aria-pressed': 'false' }, 'Follow live');
    const lastSeq = () => (rows.length ? rows[rows.length - 1].fact.seq : Number(q.get('after_seq') || 0));
    followBtn.addEventListener('click', () => {
      if (follow) {
        stopFollow();
        followBtn.textContent = 'Follow live';
        followBtn.setAttribute('aria-pressed', 'false');
        live.textContent = 'Not following.';
        return;
      }
      followBtn.textContent = 'Stop following';
      followBtn.setAttribute('aria-pressed', 'true');
      startFollow(base, lastSeq(), q, (fact, raw) => {
        rows.push({ fact, raw });
        body.append(factRow(fact, raw));
        live.textContent = `Following live: last fact ${fact.seq}.`;
      }, (msg) => { live.textContent = msg; });
      live.textContent = `Following live after seq ${lastSeq()}.`;
    });
    const next = nextQuery(r.link);
    const pager = el('p', { class: 'pager' });
    const first = new URLSearchParams(p); first.delete('after_seq');
    pager.append(el('a', { href: `#/entity/${enc(type)}/${enc(id)}/facts?` + first, id: 'f-first' }, 'First page'));
    if (next !== null) {
      const n = new URLSearchParams(p); n.set('after_seq', new URLSearchParams(next).get('after_seq'));
      pager.append(el('a', { href: `#/entity/${enc(type)}/${enc(id)}/facts?` + n, id: 'f-next' }, 'Next page'));
    }
    section.append(el('div', { class: 'fields' }, verify, followBtn), verdict, live, tbl, pager);
  }

  // -- live follow (GET .../facts/stream, Server-Sent Events over fetch) --

  function stopFollow() {
    if (follow) follow.ctl.abort();
    follow = null;
  }
  function matches(fact, q) {
    return FILTERS.every(([name]) => !q.get(name) || String(fact[name] ?? '') === q.get(name)) &&
      (!q.get('since') || fact.timestamp >= Number(q.get('since'))) &&
      (!q.get('until') || fact.timestamp < Number(q.get('until')));
  }
  function startFollow(base, after, q, onFact, onState) {
    const me = { ctl: new AbortController(), last: after };
    follow = me;
    const run = async (tries) => {
      if (follow !== me) return;
      let r;
      try {
        r = await fetch(`${base}/facts/stream?after_seq=${me.last}`, { headers: { 'X-API-Key': key }, signal: me.ctl.signal });
      } catch (e) {
        if (follow !== me) return;
        onState('Live follow interrupted; reconnecting.');
        return setTimeout(() => run(tries + 1), Math.min(5000, 250 * 2 ** tries));
      }
      if (!r.ok) {
        const text = await r.text();
        let j = null; try { j = JSON.parse(text); } catch (e) { /* not JSON */ }
        return onState('Live follow refused: ' + problem({ status: r.status, json: j }));
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const ev = { event: '', data: '' };
            for (const line of block.split('\n')) {
              if (line.startsWith('event: ')) ev.event = line.slice(7);
              else if (line.startsWith('data: ')) ev.data = line.slice(6);
            }
            if (!ev.data) continue; // a keep-alive comment
            if (ev.event === '') {
              const fact = JSON.parse(ev.data);
              me.last = fact.seq;
              if (matches(fact, q)) onFact(fact, ev.data);
            } else if (ev.event === 'history') {
              me.last = JSON.parse(ev.data).last_seq_kept;
              onState(`Rolled back: the facts after seq ${me.last} shown are no longer the entity's; its facts from there follow.`);
            } else if (ev.event === 'overflow') {
              me.last = JSON.parse(ev.data).last_seq;
              onState(`Fell behind; resuming after seq ${me.last}.`);
            } else if (ev.event === 'failed') {
              onState('Live follow ended: ' + JSON.parse(ev.data).detail);
              follow = null;
              return;
            }
          }
        }
      } catch (e) {
        if (follow !== me) return;
      }
      if (follow === me) setTimeout(() => run(0), 250); // the server closed: resume
    };
    run(0);
  }

  // -- dead letters, breakers, alarms --

  async function showDeadLetters(type, id) {
    const { section, base } = entityFrame(type, id, 'dead-letters');
    const r = await api('GET', `${base}/dead-letters`);
    if (!r.ok) return setStatus('Dead letters: ' + problem(r));
    setStatus(`${r.json.length} dead letters.`);
    const act = async (dl, action) => {
      const a = await api('POST', `${base}/dead-letters/${enc(dl.id)}/${action}`);
      await showDeadLetters(type, id);
      setStatus(a.ok ? `Dead letter ${dl.id}: ${action} done, now ${a.json.status}.` : `Dead letter ${dl.id}: ${action} refused: ${problem(a)}`);
    };
    const final = (s) => s === 'resolved' || s === 'discarded';
    section.append(table('Dead letters of this entity', [
      ['ID', (d) => el('span', { class: 'mono' }, d.id)],
      ['Status', (d) => el('span', { class: 'dl-status', 'data-id': d.id }, d.status)],
      ['Operation', (d) => d.operation || ''],
      ['Error', (d) => `${d.error_code || ''} ${d.error_message || ''}`],
      ['Attempts', (d) => String(d.attempts ?? ''), 'num'],
      ['Created', (d) => when(d.created_at)],
      ['Actions', (d) => ['retry', 'discard', 'acknowledge'].map((a) =>
        el('button', { type: 'button', class: 'dl-' + a, 'data-id': d.id, disabled: final(d.status),
          'aria-label': `${a} dead letter ${d.id}`, on: { click: () => act(d, a) } }, a))],
    ], r.json));
  }

  async function showBreakers(type, id) {
    const { section, base } = entityFrame(type, id, 'breakers');
    const r = await api('GET', `${base}/breakers`);
    if (!r.ok) return setStatus('Breakers: ' + problem(r));
    setStatus(`${r.json.length} breakers.`);
    const act = async (b, action) => {
      const a = await api('POST', `${base}/breakers/${enc(b.tool)}/${action}`);
      await showBreakers(type, id);
      setStatus(a.ok ? `Breaker ${b.tool}: now ${a.json.state}.` : `Breaker ${b.tool}: ${action} refused: ${problem(a)}`);
    };
    section.append(table('Circuit breakers of this entity; expand History for a breaker\'s state changes', [
      ['Tool', (b) => b.tool],
      ['State', (b) => el('span', { class: 'breaker-state' }, b.state)],
      ['Requests', (b) => String(b.request_count ?? ''), 'num'],
      ['Failures', (b) => String(b.failure_count ?? ''), 'num'],
      ['Updated', (b) => when(b.updated_at)],
      ['Actions', (b) => [['force-open', 'Force open'], ['reset', 'Reset']].map(([a, label]) =>
        el('button', { type: 'button', class: 'br-' + a, 'aria-label': `${label} breaker ${b.tool}`,
          on: { click: () => act(b, a) } }, label))],
      ['History', (b) => breakerHistory(base, b.tool)],
    ], r.json));
  }

  /// A breaker's state changes, newest first: its lifecycle facts, read when first expanded.
  function breakerHistory(base, tool) {
    const box = el('div', { class: 'br-history-body' });
    const d = el('details', { class: 'br-history', 'data-tool': tool },
      el('summary', {}, `State history of ${tool}`), box);
    d.addEventListener('toggle', async () => {
      if (!d.open || d.dataset.loaded) return;
      d.dataset.loaded = '1';
      const p = new URLSearchParams({ type: 'lifecycle', subtype: 'circuit_breaker_state_changed',
        tool_id: tool, order: 'desc', limit: '100' });
      const r = await api('GET', `${base}/facts?` + p);
      if (!r.ok) {
        box.replaceChildren(el('p', {}, 'History: ' + problem(r)));
        return setStatus(`Breaker ${tool} history: ` + problem(r));
      }
      box.replaceChildren(table(`State changes of ${tool}, newest first${nextQuery(r.link) !== null ? ' (the last 100)' : ''}`, [
        ['Seq', (f) => String(f.seq), 'num'],
        ['Time', (f) => when(f.timestamp)],
        ['Move', (f) => el('span', { class: 'br-move' }, `${f.data.previous_state} -> ${f.data.new_state}`)],
        ['Reason', (f) => f.data.reason || ''],
        ['By', (f) => f.data.actor || ''],
      ], r.json));
      setStatus(`Breaker ${tool}: ${r.json.length} state changes shown.`);
    });
    return d;
  }

  // -- idempotency keys (GET .../keys, paged in key order) --

  async function showKeys(type, id, q) {
    const { section, base } = entityFrame(type, id, 'keys');
    const p = new URLSearchParams({ limit: q.get('limit') || '50' });
    if (q.get('after')) p.set('after', q.get('after'));
    const r = await api('GET', `${base}/keys?` + p);
    if (!r.ok) return setStatus('Keys: ' + problem(r));
    setStatus(r.json.length ? `${r.json.length} idempotency keys shown.` : 'No idempotency keys.');
    section.append(table('Idempotency keys of this entity, in key order', [
      ['Key', (k) => el('span', { class: 'mono key-name' }, k.key)],
      ['State', (k) => el('span', { class: 'key-state' }, k.state)],
      ['Reply', (k) => (k.status === null ? '' : `${k.status}${k.code ? ' ' + k.code : ''}`)],
      ['Reply bytes', (k) => String(k.response_bytes), 'num'],
      ['Created', (k) => when(k.created_at)],
      ['Expires', (k) => (k.expires_at ? when(k.expires_at) : 'kept until purged')],
    ], r.json));
    const page = `#/entity/${enc(type)}/${enc(id)}/keys?`;
    const first = new URLSearchParams({ limit: p.get('limit') });
    const pager = el('p', { class: 'pager' }, el('a', { href: page + first, id: 'k-first' }, 'First page'));
    const next = nextQuery(r.link);
    if (next !== null) {
      const n = new URLSearchParams(first);
      n.set('after', new URLSearchParams(next).get('after'));
      pager.append(el('a', { href: page + n, id: 'k-next' }, 'Next page'));
    }
    section.append(pager);
  }

  async function showAlarms(type, id) {
    const { section, base } = entityFrame(type, id, 'alarms');
    const r = await api('GET', `${base}/alarms`);
    if (!r.ok) return setStatus('Alarms: ' + problem(r));
    setStatus(`${r.json.length} alarms.`);
    section.append(table('Alarms, earliest due first', [
      ['Name', (a) => a.name],
      ['Due', (a) => when(a.due_ms)],
      ['Attempts', (a) => String(a.attempts ?? ''), 'num'],
      ['Schedule', (a) => (a.schedule ? el('pre', {}, JSON.stringify(a.schedule.spec)) : '')],
      ['Payload', (a) => el('pre', {}, JSON.stringify(a.payload))],
    ], r.json));
  }

  // -- economics: cost by tool and errors by category, from the entity's facts --

  /// Every fact of `ftype` (at most 10 pages of 1,000).
  async function allFacts(base, ftype) {
    const out = [];
    let after = 0;
    for (let page = 0; page < 10; page++) {
      const r = await api('GET', `${base}/facts?type=${ftype}&limit=1000&after_seq=${after}`);
      if (!r.ok) throw new Error(problem(r));
      out.push(...r.json);
      if (!nextQuery(r.link) || !r.json.length) return { facts: out, all: true };
      after = r.json[r.json.length - 1].seq;
    }
    return { facts: out, all: false };
  }
  /// Exact decimal sum of amount strings (12 fraction digits), as a string.
  function addDecimal(a, b) {
    const scale = (s) => {
      const [i, f = ''] = s.replace('-', '').split('.');
      const v = BigInt(i + (f + '0'.repeat(12)).slice(0, 12));
      return s.startsWith('-') ? -v : v;
    };
    const v = scale(a) + scale(b);
    const neg = v < 0n, s = (neg ? -v : v).toString().padStart(13, '0');
    const frac = s.slice(-12).replace(/0+$/, '');
    return (neg ? '-' : '') + s.slice(0, -12) + (frac ? '.' + frac : '');
  }
  function chart(label, labels, values) {
    const box = el('figure', { class: 'chart' }, el('figcaption', {}, label));
    if (window.Chart) {
      const canvas = el('canvas', { role: 'img', 'aria-label': `${label}: ` + labels.map((l, i) => `${l} ${values[i]}`).join(', ') });
      box.append(canvas);
      // eslint-disable-next-line no-new
      new window.Chart(canvas, { type: 'bar', data: { labels, datasets: [{ label, data: values.map(Number) }] },
        options: { animation: false, plugins: { legend: { display: false } } } });
      return box;
    }
    const max = Math.max(1, ...values.map(Number));
    const ns = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('viewBox', `0 0 400 ${labels.length * 24 + 4}`);
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', `${label}: ` + labels.map((l, i) => `${l} ${values[i]}`).join(', '));
    labels.forEach((l, i) => {
      const rect = document.createElementNS(ns, 'rect');
      rect.setAttribute('x', 150); rect.setAttribute('y', i * 24 + 4);
      rect.setAttribute('height', 18); rect.setAttribute('width', (240 * Number(values[i])) / max);
      const text = document.createElementNS(ns, 'text');
      text.setAttribute('x', 0); text.setAttribute('y', i * 24 + 18);
      text.setAttribute('fill', 'currentColor');
      text.textContent = `${l}: ${values[i]}`;
      svg.append(rect, text);
    });
    box.append(svg);
    return box;
  }
  async function showEconomics(type, id) {
    const { section, base } = entityFrame(type, id, 'economics');
    let costs, errors;
    try {
      costs = await allFacts(base, 'cost');
      errors = await allFacts(base, 'error');
    } catch (e) {
      return setStatus('Economics: ' + e.message);
    }
    const byTool = new Map();
    for (const f of costs.facts) {
      const k = `${f.tool_id || '(none)'} ${f.currency || ''}`.trim();
      byTool.set(k, addDecimal(byTool.get(k) || '0', f.amount || '0'));
    }
    const byCat = new Map();
    for (const f of errors.facts) {
      const k = (f.data && f.data.category) || f.subtype || '(none)';
      byCat.set(k, (byCat.get(k) || 0) + 1);
    }
    setStatus(`${costs.facts.length} cost facts and ${errors.facts.length} error facts read` +
      (costs.all && errors.all ? '.' : ' (the first 10,000 of each).'));
    const tools = [...byTool.keys()].sort(), cats = [...byCat.keys()].sort();
    section.append(
      el('h3', {}, 'Cost by tool'),
      table('Cost facts summed per tool and currency', [['Tool and currency', (k) => k], ['Cost', (k) => byTool.get(k), 'num']], tools),
      tools.length ? chart('Cost by tool', tools, tools.map((k) => byTool.get(k))) : el('p', {}, 'No cost facts.'),
      el('h3', {}, 'Errors by category'),
      table('Error facts counted per category', [['Category', (k) => k], ['Errors', (k) => String(byCat.get(k)), 'num']], cats),
      cats.length ? chart('Errors by category', cats, cats.map((k) => byCat.get(k))) : el('p', {}, 'No error facts.'));
  }

  // -- the cluster --

  function anyTable(caption, rows) {
    const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))];
    return table(caption, cols.map((c) => [c, (r) => (typeof r[c] === 'object' ? JSON.stringify(r[c]) : String(r[c] ?? ''))]), rows);
  }
  async function showCluster() {
    const section = el('section', { 'aria-labelledby': 'cl-h' }, el('h2', { id: 'cl-h' }, 'Cluster'));
    main().replaceChildren(section);
    const r = await api('GET', '/v1/cluster');
    if (r.status === 404 && r.json && r.json.code === 'NOT_CLUSTERED') {
      setStatus('');
      return section.append(el('p', { id: 'not-clustered' }, 'This server runs alone: it is not part of a cluster.'));
    }
    if (!r.ok) return setStatus('Cluster: ' + problem(r));
    setStatus('Cluster state read.');
    for (const [k, v] of Object.entries(r.json)) {
      if (Array.isArray(v) && v.length && typeof v[0] === 'object') section.append(el('h3', {}, k), anyTable(k, v));
      else section.append(el('p', {}, `${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`));
    }
  }

  // -- the router --

  async function route() {
    stopFollow();
    if (!key) return showLogin();
    $('#logout').hidden = false;
    $('#who').textContent = 'Using the key you gave (this tab only).';
    const h = location.hash || '#/entities';
    const [path, query = ''] = h.slice(1).split('?');
    const q = new URLSearchParams(query);
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    for (const a of document.querySelectorAll('header nav a'))
      a.toggleAttribute('aria-current', a.getAttribute('href') === '#/' + parts[0]) && a.setAttribute('aria-current', 'page');
    setStatus('Loading...');
    if (parts[0] === 'cluster') return showCluster();
    if (parts[0] === 'entity' && parts.length >= 3) {
      const [, type, id, tab = 'facts'] = parts;
      if (tab === 'dead-letters') return showDeadLetters(type, id);
      if (tab === 'breakers') return showBreakers(type, id);
      if (tab === 'alarms') return showAlarms(type, id);
      if (tab === 'keys') return showKeys(type, id, q);
      if (tab === 'economics') return showEconomics(type, id);
      return showFacts(type, id, q);
    }
    return showEntities(q);
  }

  $('#logout').addEventListener('click', () => {
    stopFollow();
    sessionStorage.removeItem(KEY);
    key = null;
    location.hash = '#/entities';
    showLogin('The key is forgotten.');
  });
  window.addEventListener('hashchange', route);
  route();
})();
