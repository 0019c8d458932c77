// Kiln dashboard: the cluster and jobs overview (#/) and one job's page (#/job/<id>), refreshed
// every 5 s from the coordinator's JSON API. Plain ES2020, no build step; uPlot is the global
// from uPlot.iife.min.js.
//
// Invariants:
//  - Server text reaches the DOM only through esc() or textContent; class names built from
//    server values go through cls().
//  - At most one refresh is in flight. A timer tick that finds one running is skipped; a route
//    change that finds one running queues exactly one more.
//  - A refresh that finishes after the route changed touches nothing (its generation is stale).
//  - A chart is re-created only when its series set (axis, columns x attempts) changes;
//    otherwise it gets setData, so a refresh costs one pass over the steps.
//  - window.kilnPage.ready is false from a route change until a refresh of that route has
//    rendered with every fetch answered (a 404 counts as an answer).
//  - Nothing here writes to the console: the browser test fails on any console error.
'use strict';

(() => {
  const REFRESH_MS = 5000;
  const STEPS_MAX = 4096;         // the most a job keeps: every stored point comes
  const EVENTS_KEPT = 5000;       // a page open for weeks must not grow without bound
  const EVENTS_PAGE = 1000;
  const EVENTS_PAGES_MAX = 20;    // per refresh; a longer backlog arrives over later ticks
  const CHART_HEIGHT = 220;
  const TOKEN_KEY = 'kiln.token';

  window.kilnPage = {ready: false};
  const $ = (id) => document.getElementById(id);

  // ---- formatting -------------------------------------------------------------------------

  const ESC = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
  const esc = (v) => (v == null ? '' : String(v).replace(/[&<>"']/g, (c) => ESC[c]));
  const cls = (v) => String(v == null || v === '' ? 'unknown' : v).toLowerCase().replace(/[^a-z0-9_-]/g, '_');
  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  const DASH = '—';
  const collator = new Intl.Collator('en', {numeric: true});
  const compact = new Intl.NumberFormat('en-US', {notation: 'compact', maximumFractionDigits: 1});

  // null and non-finite values print as a dash, so callers may pass server values straight in.
  const fmt = {
    loss: (v) => (num(v) == null ? DASH : v.toPrecision(4)),
    int: (v) => (num(v) == null ? DASH : Math.round(v).toLocaleString('en-US')),
    pct: (v) => (num(v) == null ? DASH : (v * 100).toFixed(1) + '%'),
    sci: (v) => (num(v) == null ? DASH : v === 0 ? '0' : v.toExponential(2)),
    compact: (v) => (num(v) == null ? DASH : compact.format(v)),
    ms: (v) => (num(v) == null ? DASH : v >= 1000 ? (v / 1000).toFixed(2) + ' s' : v.toFixed(v < 10 ? 2 : 1) + ' ms'),
  };

  function fmtBytes(b) {
    if (num(b) == null) return DASH;
    let k = 0;
    for (; b >= 1024 && k < 5; k++) b /= 1024;
    return (k === 0 ? String(b) : b.toFixed(b < 10 ? 2 : 1)) + ' ' + ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'][k];
  }

  function fmtDuration(ms) {
    if (num(ms) == null) return DASH;
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
    return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
  }

  // The coordinator writes microseconds ("...:20.123456Z"); only 3 digits parse everywhere.
  function parseTime(s) {
    if (typeof s !== 'string' || s === '') return null;
    const t = Date.parse(s.replace(/(\.\d{3})\d+/, '$1'));
    return Number.isFinite(t) ? t : null;
  }

  const pad = (n) => String(n).padStart(2, '0');
  function fmtClock(t) {
    if (t == null) return DASH;
    const d = new Date(t);
    const hms = pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
    if (d.toDateString() === new Date().toDateString()) return hms;
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + hms;
  }
  const fmtWhen = (iso) => { const t = parseTime(iso); return t == null ? '' : fmtClock(t) + ' (' + fmtDuration(Date.now() - t) + ' ago)'; };

  // ---- session and API --------------------------------------------------------------------

  // sessionStorage is the source of truth, read on every use, so a token put there by another
  // tab's script or a test is picked up; it can throw (storage disabled), and then the
  // in-memory copy keeps the page working.
  let memToken = '';
  const token = () => { try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return memToken; } };
  function setToken(t) {
    memToken = t;
    try { t ? sessionStorage.setItem(TOKEN_KEY, t) : sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* memory only */ }
  }

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  // Resolves to the JSON body, or null for a 404 when `optional`; rejects with ApiError.
  // A 401 signs out here, so every caller gets the same behaviour.
  async function api(path, optional = false) {
    let res;
    try {
      res = await fetch(path, {headers: {Authorization: 'Bearer ' + token()}, cache: 'no-store'});
    } catch (e) {
      throw new ApiError(0, path + ': coordinator unreachable');
    }
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    const said = body && typeof body.error === 'string' ? body.error : '';
    if (res.status === 401) {
      signOut(said || 'token rejected');
      throw new ApiError(401, said || 'unauthorized');
    }
    if (res.status === 404 && optional) return null;
    if (!res.ok) throw new ApiError(res.status, path + ': ' + (said || res.status + ' ' + res.statusText));
    return body;
  }
  const enc = encodeURIComponent;

  // ---- page state and routing -------------------------------------------------------------

  const S = {
    gen: 0,              // bumped on every route change; stale refreshes compare against it
    inFlight: false,
    again: false,        // a route change arrived during a refresh
    lastStart: 0,
    lastOk: 0,
    clusterMissing: false,  // /v1/cluster answered 404 once: stop asking (each 404 logs)
    jobsHtml: '',
    nodesHtml: '',
    job: null,           // {id, events, lastSeq, steps, eventsShown}
    charts: new Map(),   // name -> {u, key, zoomed, markers, el}
    axis: 'step',
  };

  function route() {
    const m = /^#\/job\/(.+)$/.exec(location.hash);
    if (m) { try { return {page: 'job', id: decodeURIComponent(m[1])}; } catch (e) { /* bad escape */ } }
    return {page: 'overview'};
  }

  function showView(id) {
    for (const v of ['login-view', 'overview-view', 'job-view']) $(v).hidden = v !== id;
    $('logout').hidden = id === 'login-view';
  }

  function showError(msg) { $('error').textContent = msg; $('error').hidden = !msg; }

  const signOut = (message) => { setToken(''); showLogin(message); };

  function showLogin(message) {
    S.gen++;
    window.kilnPage.ready = false;
    resetJob();
    showError('');
    $('login-error').textContent = message || '';
    $('login-error').hidden = !message;
    showView('login-view');
    $('token').focus();
  }

  function onRoute() {
    S.gen++;
    window.kilnPage.ready = false;
    if (!token()) { showLogin(''); return; }
    const r = route();
    if (r.page !== 'job' || (S.job && S.job.id !== r.id)) resetJob();
    showView(r.page === 'job' ? 'job-view' : 'overview-view');
    requestRefresh();
  }

  function resetJob() {
    destroyCharts();
    S.job = null;
    for (const id of ['job-name', 'job-state', 'job-fields', 'signatures', 'ranks', 'events', 'steps-note', 'ranks-count', 'events-count']) $(id).textContent = '';
    $('job-waiting').hidden = true;
    $('signatures-box').hidden = true;
  }

  function requestRefresh() { if (S.inFlight) S.again = true; else refresh(); }

  // Never rejects: every failure ends in the banner (or the login form for a 401).
  async function refresh() {
    if (!token()) return;
    S.inFlight = true;
    S.lastStart = Date.now();
    paintStatus();
    const gen = S.gen;
    const r = route();
    try {
      const errors = r.page === 'job' ? await refreshJob(r.id, gen) : await refreshOverview(gen);
      if (gen === S.gen && !errors.some((e) => e.status === 401)) {
        showError(errors.map((e) => e.message || String(e)).join(' · '));
        if (!errors.length) { S.lastOk = Date.now(); window.kilnPage.ready = true; }
      }
    } catch (e) {
      if (gen === S.gen && !(e instanceof ApiError && e.status === 401)) showError(e && e.message ? e.message : String(e));
    } finally {
      S.inFlight = false;
      paintStatus();
      if (S.again) { S.again = false; refresh(); }
    }
  }

  // One timer drives the clock and the refresh, so there is never a second refresh loop.
  function tick() {
    $('clock').textContent = fmtClock(Date.now());
    paintStatus();
    if (!token() || S.inFlight || document.hidden) return;
    if (Date.now() - S.lastStart >= REFRESH_MS) refresh();
  }

  function paintStatus() {
    const el = $('refresh');
    el.classList.toggle('busy', S.inFlight);
    el.classList.toggle('stale', S.lastOk > 0 && Date.now() - S.lastOk > 3 * REFRESH_MS);
    $('refresh-text').textContent = S.inFlight ? 'refreshing' : S.lastOk ? 'updated ' + fmtDuration(Date.now() - S.lastOk) + ' ago' : 'not loaded';
  }

  // Fetches are settled (allSettled), not raced, so one failing section still lets the others
  // render.
  const errorsOf = (results) => results.filter((r) => r.status === 'rejected').map((r) => r.reason);

  // ---- overview ---------------------------------------------------------------------------

  async function refreshOverview(gen) {
    const results = await Promise.allSettled([api('/v1/nodes'), api('/v1/jobs'),
      S.clusterMissing ? Promise.resolve(null) : api('/v1/cluster', true)]);
    if (gen !== S.gen) return [];
    const [nodes, jobs, cluster] = results;
    if (nodes.status === 'fulfilled') renderNodes(nodes.value);
    if (jobs.status === 'fulfilled') renderJobs(jobs.value);
    if (cluster.status === 'fulfilled') {
      if (cluster.value === null) S.clusterMissing = true;
      renderCluster(cluster.value);
    }
    return errorsOf(results);
  }

  function chips(counts) {
    return Object.keys(counts).sort().map((k) =>
      `<span class="chip st-${cls(k)}">${esc(k)} <b>${esc(fmt.int(num(counts[k])))}</b></span>`).join('');
  }
  const figure = (label, valueHtml) => `<div class="figure"><div class="fig-label">${esc(label)}</div><div class="fig-value">${valueHtml}</div></div>`;
  const isObj = (v) => v != null && typeof v === 'object' && !Array.isArray(v);

  function renderCluster(c) {
    $('cluster-panel').hidden = !isObj(c);
    if (!isObj(c)) return;
    const out = [];
    if ('goodput' in c) out.push(figure('goodput', esc(fmt.pct(c.goodput))));
    if ('ettr' in c) out.push(figure('ETTR', esc(fmt.pct(c.ettr))));
    if (isObj(c.jobs_by_state)) out.push(figure('jobs', chips(c.jobs_by_state)));
    if (isObj(c.nodes_by_state)) out.push(figure('nodes', chips(c.nodes_by_state)));
    if (Array.isArray(c.idle_nodes)) {
      const names = c.idle_nodes.slice().sort(collator.compare);
      out.push(figure('idle nodes', `<b>${names.length}</b> <span class="muted small">${esc(names.join(', '))}</span>`));
    }
    if (isObj(c.storage_by_team)) {
      const rows = Object.keys(c.storage_by_team).sort().map((t) =>
        `<div class="kv"><span>${esc(t)}</span><b>${esc(fmtBytes(c.storage_by_team[t]))}</b></div>`);
      out.push(figure('storage by team', rows.join('') || DASH));
    }
    $('cluster').innerHTML = out.join('');
  }

  // Pools, then racks, then nodes: the failure domains a gang is packed by, so an operator
  // sees at a glance which domain a bad node takes out.
  function renderNodes(body) {
    const nodes = Array.isArray(body && body.nodes) ? body.nodes : [];
    const pools = new Map();
    const entry = (map, key, make) => (map.has(key) ? map.get(key) : map.set(key, make()).get(key));
    for (const n of nodes) {
      const labels = isObj(n.labels) ? n.labels : {};
      entry(entry(pools, labels.pool || 'default', () => new Map()), labels.rack || '-', () => []).push(n);
    }
    const html = [];
    for (const pool of [...pools.keys()].sort(collator.compare)) {
      const racks = pools.get(pool);
      html.push(`<section class="pool"><h3>pool ${esc(pool)}</h3><div class="racks">`);
      for (const rack of [...racks.keys()].sort(collator.compare)) {
        const list = racks.get(rack).sort((a, b) => collator.compare(String(a.name), String(b.name)));
        html.push(`<div class="rack"><h4>rack ${esc(rack)}</h4><div class="tiles">${list.map(nodeTile).join('')}</div></div>`);
      }
      html.push('</div></section>');
    }
    const out = html.join('') || '<p class="empty">no nodes have joined</p>';
    if (out !== S.nodesHtml) { $('nodes').innerHTML = out; S.nodesHtml = out; }
    $('nodes-count').textContent = `(${nodes.length})`;
  }

  function nodeTile(n) {
    const since = parseTime(n.since);
    const faults = Array.isArray(n.recent_faults) ? n.recent_faults.length : num(n.recent_faults) || 0;
    const pf = isObj(n.preflight) ? n.preflight : null;
    let pfHtml = '<div class="pf muted">preflight: none yet</div>';
    if (pf) {
      const t = parseTime(pf.checked);
      pfHtml = `<div class="pf ${pf.passed ? 'pf-ok' : 'pf-bad'}">preflight ${esc(pf.level)} ${pf.passed ? 'passed' : 'FAILED'}` +
        `${t == null ? '' : ' · ' + esc(fmtDuration(Date.now() - t)) + ' ago'}</div>` +
        (!pf.passed && pf.summary ? `<div class="pf-summary">${esc(pf.summary)}</div>` : '');
    }
    return `<div class="node node-${cls(n.state)}" data-node="${esc(n.name)}" data-state="${esc(n.state)}">` +
      `<div class="node-head"><b>${esc(n.name)}</b><span class="node-state">${esc(n.state || 'unknown')}</span></div>` +
      `<div class="node-meta">${esc(num(n.slots) == null ? '' : n.slots + ' slots · ')}${since == null ? '' : 'for ' + esc(fmtDuration(Date.now() - since))}</div>` +
      (n.reason ? `<div class="node-reason">${esc(n.reason)}</div>` : '') +
      pfHtml +
      (faults ? `<div class="node-faults">${esc(faults)} recent fault${faults === 1 ? '' : 's'}</div>` : '') +
      '</div>';
  }

  // Built as one string and assigned once: 1,000 rows stay one layout, not 1,000.
  function renderJobs(body) {
    const jobs = Array.isArray(body && body.jobs) ? body.jobs : [];
    const now = Date.now();
    const rows = jobs.map((j) => {
      const submitted = parseTime(j.submitted);
      const pos = num(j.queue_position);
      const queue = esc(j.queue || '') + (pos > 0 ? ` <span class="muted">#${pos}</span>` : '');
      return `<tr data-job="${esc(j.id)}"><td><a href="#/job/${esc(enc(j.id))}">${esc(j.id)}</a></td>` +
        `<td>${esc(j.name)}</td><td><span class="badge st-${cls(j.state)}">${esc(j.state)}</span></td>` +
        `<td>${queue}</td><td>${esc(j.team)}</td><td class="num">${esc(fmt.int(j.attempt))}</td>` +
        `<td class="num">${submitted == null ? DASH : esc(fmtDuration(now - submitted))}</td>` +
        `<td class="num">${esc(fmt.pct(j.goodput))}</td><td class="num">${esc(fmt.int(j.last_step))}</td></tr>`;
    });
    const html = rows.join('') || '<tr class="empty"><td colspan="9">no jobs</td></tr>';
    if (html !== S.jobsHtml) { $('jobs-body').innerHTML = html; S.jobsHtml = html; }
    $('jobs-count').textContent = `(${jobs.length})`;
  }

  // ---- job page ---------------------------------------------------------------------------

  async function refreshJob(id, gen) {
    if (!S.job || S.job.id !== id) S.job = {id, events: [], lastSeq: 0, steps: null, eventsShown: -1};
    const job = S.job;
    const base = '/v1/jobs/' + enc(id);
    const results = await Promise.allSettled([api(base), api(base + '/steps?max=' + STEPS_MAX, true), fetchEvents(job, base)]);
    if (gen !== S.gen) return [];
    const [status, steps] = results;
    if (status.status === 'rejected' && status.reason && status.reason.status === 404) {
      $('job-name').textContent = 'job ' + id + ' not found';
      return [];
    }
    if (status.status === 'fulfilled') renderJobStatus(status.value || {});
    if (steps.status === 'fulfilled') job.steps = steps.value;
    renderEvents(job);
    renderCharts();
    return errorsOf(results);
  }

  // Events are append-only with increasing seq and `after` is exclusive, so only new ones
  // are fetched; the seq check also drops repeats should a server treat `after` inclusively.
  async function fetchEvents(job, base) {
    for (let page = 0; page < EVENTS_PAGES_MAX; page++) {
      const body = await api(`${base}/events?after=${job.lastSeq}&limit=${EVENTS_PAGE}`, true);
      const list = Array.isArray(body && body.events) ? body.events : [];
      const before = job.lastSeq;
      for (const e of list) {
        if (num(e.seq) != null && e.seq > job.lastSeq) { job.events.push(e); job.lastSeq = e.seq; }
      }
      if (list.length < EVENTS_PAGE || job.lastSeq === before) break;
    }
    if (job.events.length > EVENTS_KEPT) job.events.splice(0, job.events.length - EVENTS_KEPT);
  }

  function renderJobStatus(s) {
    $('job-name').textContent = (s.id || '') + (s.name ? ' · ' + s.name : '');
    $('job-state').textContent = s.state || 'unknown';
    $('job-state').className = 'badge st-' + cls(s.state);
    const pos = num(s.queue_position);
    const fields = [
      ['attempt', fmt.int(s.attempt)],
      ['restarts', num(s.restarts) == null ? '' : s.restarts + ' / ' + (num(s.max_restarts) == null ? DASH : s.max_restarts)],
      ['nodes', Array.isArray(s.nodes) ? s.nodes.join(', ') : ''],
      ['team', s.team],
      ['queue', (s.queue || '') + (pos > 0 ? ' #' + pos : '')],
      ['goodput', fmt.pct(s.goodput)],
      ['last step', fmt.int(s.last_step)],
      ['submitted', fmtWhen(s.submitted)],
      ['running since', fmtWhen(s.running_since)],
      ['finished', fmtWhen(s.finished)],
      ['reason', s.reason],
    ];
    $('job-fields').innerHTML = fields.filter(([, v]) => v != null && v !== '' && v !== DASH)
      .map(([k, v]) => `<div><dt>${esc(k)}</dt><dd>${esc(v)}</dd></div>`).join('');
    const waiting = $('job-waiting');
    waiting.hidden = !s.waiting;
    waiting.textContent = s.waiting ? 'waiting' + (s.waiting_kind ? ' (' + s.waiting_kind + ')' : '') + ': ' + s.waiting : '';
    const sigs = Array.isArray(s.signatures) ? s.signatures : [];
    $('signatures-box').hidden = sigs.length === 0;
    $('signatures').innerHTML = sigs.map((g) => {
      const where = [['attempt', g.attempt], ['rank', g.rank], ['node', g.node], ['step', g.step]]
        .filter(([, v]) => v != null && v !== '').map(([k, v]) => k + ' ' + v).join(' · ');
      return `<li class="signature sig-${cls(g.kind)}"><span class="sig-kind">${esc(g.kind)}</span>` +
        `<span class="sig-text">${esc(g.text)}</span><span class="muted small">${esc(where)}</span></li>`;
    }).join('');
    renderRanks(Array.isArray(s.ranks) ? s.ranks : []);
  }

  function renderRanks(ranks) {
    $('ranks-count').textContent = ranks.length ? `(${ranks.length})` : '';
    if (!ranks.length) { $('ranks').innerHTML = '<p class="empty">no ranks in the current attempt</p>'; return; }
    const sorted = ranks.slice().sort((a, b) => (num(a.rank) ?? 0) - (num(b.rank) ?? 0));
    $('ranks').innerHTML = sorted.map((r) => {
      const stepped = num(r.step) != null && r.step >= 0;
      const z = num(r.z);
      return `<div class="rank rank-${cls(r.state)}${r.straggler ? ' straggler' : ''}" data-rank="${esc(r.rank)}" title="${esc(r.describe)}">` +
        `<div class="rank-head"><b>rank ${esc(r.rank)}</b><span>${esc(r.node)}</span></div>` +
        `<div>${esc(r.state || 'unknown')}${stepped ? ' · step ' + esc(fmt.int(r.step)) : ''}</div>` +
        (num(r.step_ms) ? `<div class="small">${esc(fmt.ms(r.step_ms))} / step · compute ${esc(fmt.ms(r.compute_ms))} · comm ${esc(fmt.ms(r.comm_exposed_ms))}</div>` : '') +
        (z != null ? `<div class="rank-z">${r.straggler ? 'straggler · ' : ''}z ${esc(z.toFixed(1))}</div>` : r.straggler ? '<div class="rank-z">straggler</div>' : '') +
        (r.describe ? `<div class="small muted">${esc(r.describe)}</div>` : '') + '</div>';
    }).join('');
  }

  function eventDetail(e) {
    const parts = [];
    for (const k of ['cause', 'message', 'reason']) if (e[k]) parts.push(String(e[k]));
    if (e.rank != null) parts.push('rank ' + e.rank + (e.node ? ' on ' + e.node : ''));
    else if (e.node) parts.push('node ' + e.node);
    if (Array.isArray(e.nodes) && e.nodes.length) parts.push('nodes ' + e.nodes.join(', '));
    if (num(e.z) != null) parts.push('z ' + e.z.toFixed(1));
    if (num(e.step) != null) parts.push('step ' + fmt.int(e.step));
    return parts.join(' · ');
  }

  // Newest first: an operator opens the page to see what just happened.
  function renderEvents(job) {
    if (job.eventsShown === job.lastSeq) return;  // seq, not length: the list is capped
    job.eventsShown = job.lastSeq;
    const items = [];
    for (let k = job.events.length - 1; k >= 0; k--) {
      const e = job.events[k];
      items.push(`<li class="event event-${cls(e.type)}" data-seq="${esc(e.seq)}"><time>${esc(fmtClock(parseTime(e.ts)))}</time>` +
        `<span class="etype">${esc(e.type)}</span><span class="eatt">${num(e.attempt) == null ? '' : 'a' + esc(e.attempt)}</span>` +
        `<span class="edetail">${esc(eventDetail(e))}</span></li>`);
    }
    $('events').innerHTML = items.join('') || '<li class="empty">no events</li>';
    $('events-count').textContent = `(${job.events.length})`;
  }

  // ---- charts -----------------------------------------------------------------------------

  // The first series of each chart is the one data-points counts.
  const CHARTS = [
    {name: 'loss', axis: (v) => String(+v.toPrecision(4)), series: [
      {col: 'loss', label: 'train loss', color: '#2563eb', fmt: fmt.loss},
      {col: 'val_loss', label: 'val loss', color: '#7c3aed', fmt: fmt.loss, points: true}]},
    {name: 'lr', axis: fmt.sci, series: [
      {col: 'lr', label: 'learning rate', color: '#0891b2', fmt: fmt.sci}]},
    {name: 'throughput', axis: fmt.compact, series: [
      {col: 'tokens_per_s', label: 'tokens/s', color: '#2563eb', fmt: fmt.int},
      {col: 'mfu', label: 'MFU', color: '#16a34a', fmt: fmt.pct, scale: 'mfu'}]},
    {name: 'steptime', axis: fmt.compact, series: [
      {col: 'compute_ms', label: 'compute ms', color: '#2563eb', fmt: fmt.ms},
      {col: 'comm_exposed_ms', label: 'exposed comm ms', color: '#9333ea', fmt: fmt.ms},
      {col: 'ckpt_stall_ms', label: 'ckpt stall ms', color: '#64748b', fmt: fmt.ms}]},
  ];
  const MARKERS = {  // drawn in this order, so faults end on top
    placed: {order: 0, color: '#94a3b8', width: 1, dash: [4, 4]},
    straggler: {order: 1, color: '#ea580c', width: 1.5, dash: [2, 3]},
    fault: {order: 2, color: '#dc2626', width: 2, dash: []},
  };
  const GRID = {stroke: '#e5e7eb', width: 1};

  const column = (cols, name, n) => (Array.isArray(cols[name]) ? cols[name] : new Array(n).fill(null));

  // Where each marker sits on the current x axis. Placed (attempt start) has no step of its
  // own: its attempt's first step is where that attempt's curve begins. A fault without a
  // step falls back to the last step logged at or before its time.
  function eventMarkers(events, cols, n, axis) {
    const att = column(cols, 'attempt', n), step = column(cols, 'step', n), wall = column(cols, 'wall_ms', n);
    const firstStep = new Map();
    for (let i = 0; i < n; i++) {
      const a = num(att[i]) ?? 0, s = num(step[i]);
      if (s != null && (!firstStep.has(a) || s < firstStep.get(a))) firstStep.set(a, s);
    }
    const stepAt = (e, t = parseTime(e.ts), best = null) => {
      for (let i = 0; t != null && i < n; i++) {
        if (num(wall[i]) != null && wall[i] <= t && (e.attempt == null || (num(att[i]) ?? 0) === e.attempt) && num(step[i]) != null) best = step[i];
      }
      return best;
    };
    const out = [];
    for (const e of events) {
      const kind = e.type;
      if (kind !== 'fault' && kind !== 'placed' && kind !== 'straggler') continue;
      let x;
      if (axis === 'wall') { const t = parseTime(e.ts); x = t == null ? null : t / 1000; }
      else if (kind === 'placed') x = firstStep.get(num(e.attempt) ?? 0) ?? null;
      else x = num(e.step) ?? stepAt(e);
      if (x != null) out.push({x, kind});
    }
    return out.sort((p, q) => MARKERS[p.kind].order - MARKERS[q.kind].order);
  }

  // Rows of the shared x column, sorted by (x, attempt). After a restart a new attempt may
  // repeat steps of the old one, so x can repeat; each attempt gets its own series (nulls on
  // the other attempts' rows, bridged by spanGaps), so no line zigzags between attempts and
  // every point is drawn. Markers outside the data get rows of their own, all series null, so
  // uPlot's auto range (and a zoom reset) always includes them.
  function buildFrame(cols, n, axis, events) {
    const att = column(cols, 'attempt', n), step = column(cols, 'step', n), wall = column(cols, 'wall_ms', n);
    const rows = [];
    let lo = Infinity, hi = -Infinity;
    for (let i = 0; i < n; i++) {
      const x = axis === 'wall' ? (num(wall[i]) == null ? null : wall[i] / 1000) : num(step[i]);
      if (x == null) continue;
      rows.push({x, a: num(att[i]) ?? 0, i});
      lo = Math.min(lo, x); hi = Math.max(hi, x);
    }
    const attempts = [...new Set(rows.map((r) => r.a))].sort((p, q) => p - q);
    const markers = eventMarkers(events, cols, n, axis);
    for (const m of markers) if (m.x < lo || m.x > hi) rows.push({x: m.x, a: -1, i: -1});
    rows.sort((p, q) => p.x - q.x || p.a - q.a || p.i - q.i);
    return {x: rows.map((r) => r.x), rows, attempts, markers};
  }

  function renderCharts() {
    const job = S.job;
    if (!job) return;
    const cols = isObj(job.steps) && isObj(job.steps.columns) ? job.steps.columns : {};
    const n = Array.isArray(cols.step) ? cols.step.length : 0;
    $('no-steps').hidden = n > 0;
    $('charts').hidden = n === 0;
    const stored = job.steps && num(job.steps.stored);
    $('steps-note').textContent =
        n ? `${fmt.int(n)} rows` + (stored > n ? ` of ${fmt.int(stored)} stored` : '') : '';
    if (n === 0) { destroyCharts(); return; }
    if (typeof uPlot !== 'function') {  // the rest of the page still works without it
      $('charts').hidden = true;
      $('no-steps').hidden = false;
      $('no-steps').textContent = 'charts unavailable: uPlot.iife.min.js did not load';
      return;
    }
    const frame = buildFrame(cols, n, S.axis, job.events);
    for (const spec of CHARTS) drawChart(spec, frame, cols, n);
  }

  function drawChart(spec, frame, cols, n) {
    const el = document.querySelector(`.chart[data-chart="${spec.name}"]`);
    const defs = [], data = [frame.x];
    let points = 0;
    spec.series.forEach((s, k) => {
      const col = column(cols, s.col, n);
      for (const a of frame.attempts) {
        let count = 0;
        const ys = frame.rows.map((r) => {
          const v = r.a === a ? num(col[r.i]) : null;
          if (v != null) count++;
          return v;
        });
        if (k === 0) points += count;
        if (count) { defs.push({s, a}); data.push(ys); }
      }
    });
    const key = S.axis + '|' + defs.map((d) => d.s.col + '@' + d.a).join(',');
    let c = S.charts.get(spec.name);
    el.querySelector('.chart-empty').hidden = defs.length > 0;
    if (!defs.length) { destroyChart(spec.name); delete el.dataset.points; delete el.dataset.faults; return; }
    if (c && c.key === key) {
      c.markers = frame.markers;
      if (!c.zoomed) c.u.setData(data);
      else {
        // setData without a scale reset does not redraw; re-setting the window does, and
        // re-ranges y over the new data inside it.
        const {min, max} = c.u.scales.x;
        c.u.setData(data, false);
        c.u.setScale('x', {min, max});
      }
    } else {
      destroyChart(spec.name);
      c = {key, zoomed: false, markers: frame.markers, el, u: null};
      c.u = new uPlot(chartOptions(spec, defs, c, el), data, el.querySelector('.plot'));
      S.charts.set(spec.name, c);
    }
    // Set now as well as in the draw hook: uPlot draws in a microtask, after this returns.
    el.dataset.points = String(points);
    el.dataset.faults = String(frame.markers.filter((m) => m.kind === 'fault').length);
  }

  function chartOptions(spec, defs, c, el) {
    const latest = Math.max(...defs.map((d) => d.a));
    const several = new Set(defs.map((d) => d.a)).size > 1;
    const wall = S.axis === 'wall';
    const series = [wall ? {label: 'time'} : {label: 'step', value: (u, v) => fmt.int(v)}];
    for (const {s, a} of defs) {
      series.push(Object.assign({
        label: several ? `${s.label} · a${a}` : s.label,
        scale: s.scale || 'y',
        stroke: s.color,
        width: 1.5,
        alpha: a === latest ? 1 : 0.4,   // superseded attempts fade: their steps were redone
        spanGaps: true,
        value: (u, v) => s.fmt(v),
      }, s.points ? {paths: () => null, points: {show: true, size: 5, stroke: s.color, fill: s.color}} : {}));
    }
    const scales = new Set(defs.map((d) => d.s.scale || 'y'));
    const axes = [{stroke: '#475569', grid: GRID, ticks: GRID}];
    if (scales.has('y')) axes.push({scale: 'y', size: 64, stroke: '#475569', grid: GRID, ticks: GRID, values: (u, vs) => vs.map(spec.axis)});
    if (scales.has('mfu')) axes.push({scale: 'mfu', side: scales.has('y') ? 1 : 3, size: 56, stroke: '#16a34a', grid: {show: false}, values: (u, vs) => vs.map((v) => fmt.pct(v))});
    return {
      width: chartWidth(el),
      height: CHART_HEIGHT,
      // uPlot's x scale is a time scale unless told otherwise.
      scales: {x: {time: wall}},
      series,
      axes,
      cursor: {sync: {key: 'kiln-job'}, drag: {x: true, y: false}},
      hooks: {
        // Zoomed: keep the operator's window across refreshes; a double-click resets it.
        setScale: [(u, k) => {
          const x = u.data[0];
          if (k === 'x' && x.length) c.zoomed = u.scales.x.min > x[0] || u.scales.x.max < x[x.length - 1];
        }],
        draw: [(u) => drawMarkers(u, c)],
      },
    };
  }

  // Vertical lines across the plot area, in canvas pixels. Guarded: this runs inside uPlot's
  // microtask, where an exception would surface as an uncaught console error.
  function drawMarkers(u, c) {
    try {
      const {ctx, bbox} = u;
      const r = window.devicePixelRatio || 1;
      let faults = 0;
      ctx.save();
      for (const m of c.markers) {
        const px = Math.round(u.valToPos(m.x, 'x', true));
        if (!(px >= bbox.left - 1 && px <= bbox.left + bbox.width + 1)) continue;
        const st = MARKERS[m.kind];
        ctx.strokeStyle = ctx.fillStyle = st.color;
        ctx.lineWidth = st.width * r;
        ctx.setLineDash(st.dash.map((d) => d * r));
        ctx.beginPath(); ctx.moveTo(px, bbox.top); ctx.lineTo(px, bbox.top + bbox.height); ctx.stroke();
        if (m.kind === 'fault') {  // a notch at the top, so a fault reads even over a dense curve
          faults++;
          ctx.beginPath(); ctx.moveTo(px - 5 * r, bbox.top); ctx.lineTo(px + 5 * r, bbox.top); ctx.lineTo(px, bbox.top + 7 * r); ctx.fill();
        }
      }
      ctx.restore();
      c.el.dataset.faults = String(faults);
    } catch (e) { /* a missed marker must not break the page */ }
  }

  const chartWidth = (el) => Math.max(280, el.querySelector('.plot').clientWidth || 600);

  function destroyChart(name) {
    const c = S.charts.get(name);
    if (c) { c.u.destroy(); S.charts.delete(name); }
  }
  function destroyCharts() {
    for (const name of [...S.charts.keys()]) destroyChart(name);
    for (const el of document.querySelectorAll('.chart')) { delete el.dataset.points; delete el.dataset.faults; }
  }

  // ---- wiring -----------------------------------------------------------------------------

  function start() {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token').value.trim();
      if (!t) { $('login-error').textContent = 'enter a token'; $('login-error').hidden = false; return; }
      $('token').value = '';
      setToken(t);
      $('login-error').hidden = true;
      onRoute();
    });
    $('logout').addEventListener('click', (ev) => { ev.preventDefault(); signOut(''); });
    const readAxis = () => { S.axis = $('xaxis').value === 'wall' ? 'wall' : 'step'; };
    $('xaxis').addEventListener('change', () => {
      readAxis();
      try { renderCharts(); } catch (e) { showError('chart: ' + e.message); }
    });
    let resizeQueued = false;  // one setSize per frame however many resize events arrive
    window.addEventListener('resize', () => {
      if (resizeQueued) return;
      resizeQueued = true;
      requestAnimationFrame(() => {
        resizeQueued = false;
        for (const c of S.charts.values()) c.u.setSize({width: chartWidth(c.el), height: CHART_HEIGHT});
      });
    });
    window.addEventListener('hashchange', onRoute);
    readAxis();  // the browser may restore the select's value on reload
    $('clock').textContent = fmtClock(Date.now());
    setInterval(tick, 1000);
    onRoute();
  }

  start();
})();
