// The operator console: plain DOM, no framework. The API key lives in sessionStorage (gone with the tab) and travels
// only in the Authorization header: never in a URL, never in a cookie. Everything shown comes from the /v1 API.

const KEY_STORAGE = 'onejob.apiKey';
const TERMINAL = ['succeeded', 'failed', 'cancelled'];
const $ = (selector) => document.querySelector(selector);

/** Builds an element; text goes through textContent, so nothing the API returns is ever parsed as HTML. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') node.className = value;
    else if (name === 'text') node.textContent = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) if (child !== null && child !== undefined) node.append(child);
  return node;
}

const key = () => sessionStorage.getItem(KEY_STORAGE);

class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail ?? `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code ?? 'http_error';
  }
}

async function api(path, { method = 'GET', body } = {}) {
  if (!key()) throw new ApiError(401, { code: 'unauthorized', detail: 'Paste an API key first.' });
  const headers = { Authorization: `Bearer ${key()}`, Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'omit', cache: 'no-store' });
  const payload = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, payload);
  return payload;
}

function say(text, kind = 'error') {
  const box = $('#message');
  box.textContent = text;
  box.className = kind;
  box.hidden = !text;
}

function fail(error) {
  const hint = error.status === 401 ? ' (is the key right, and not revoked or expired?)' : error.status === 403 ? ' (the key lacks a scope)' : '';
  say(`${error.message}${hint} [${error.code ?? 'error'}]`);
}

const time = (iso) => (iso ? new Date(iso).toLocaleTimeString([], { hour12: false }) : '–');
const dateTime = (iso) => (iso ? new Date(iso).toLocaleString([], { hour12: false }) : '–');
function seconds(total) {
  if (total < 60) return `${total} s`;
  if (total < 3600) return `${Math.floor(total / 60)} min ${total % 60} s`;
  return `${Math.floor(total / 3600)} h ${Math.floor((total % 3600) / 60)} min`;
}
const ms = (value) => (value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(1)} s`);

// ---- key ----

function showKeyStatus() {
  $('#key-status').textContent = key()
    ? 'A key is set for this tab (kept in sessionStorage until the tab closes).'
    : 'No key: paste an operator key (scopes ops:read, attempts:resolve).';
}

$('#key-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const input = $('#api-key');
  sessionStorage.setItem(KEY_STORAGE, input.value.trim());
  input.value = '';
  showKeyStatus();
  say('');
  await route();
});

$('#forget-key').addEventListener('click', () => {
  sessionStorage.removeItem(KEY_STORAGE);
  showKeyStatus();
  say('Key forgotten.', 'info');
});

// ---- screens ----

let refreshTimer;

async function route() {
  clearTimeout(refreshTimer);
  const [screen, arg] = (location.hash.slice(1) || 'queue').split('/');
  const name = ['queue', 'job', 'providers', 'activity'].includes(screen) ? screen : 'queue';
  for (const section of document.querySelectorAll('main > section')) section.hidden = section.dataset.screen !== name;
  for (const link of document.querySelectorAll('nav a')) {
    if (link.dataset.screen === name) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  if (!key()) {
    $('#api-key').focus();
    return;
  }
  try {
    if (name === 'queue') await loadQueue();
    if (name === 'job' && arg) await loadJob(decodeURIComponent(arg));
    if (name === 'providers') await loadProviders();
    if (name === 'activity') await loadActivity();
  } catch (error) {
    fail(error);
  }
}

window.addEventListener('hashchange', () => {
  say('');
  route().then(() => $('main').focus({ preventScroll: true }));
});

// ---- queue ----

let queueCursor = null;

async function loadQueue(append = false) {
  const filter = new FormData($('#queue-filter'));
  const params = new URLSearchParams({ status: 'unknown', limit: '50' });
  if (filter.get('provider')) params.set('provider', String(filter.get('provider')).trim());
  if (filter.get('olderThan')) params.set('olderThan', String(filter.get('olderThan')));
  if (append && queueCursor) params.set('cursor', queueCursor);
  const page = await api(`/v1/ops/attempts?${params}`);
  const body = $('#queue-table tbody');
  if (!append) body.replaceChildren();
  for (const attempt of page.items) body.append(queueRow(attempt));
  queueCursor = page.nextCursor;
  $('#queue-more').hidden = !queueCursor;
  $('#queue-empty').hidden = body.children.length > 0;
  $('#queue-table').hidden = body.children.length === 0;
}

function queueRow(attempt) {
  const id = attempt.attemptId;
  const form = el(
    'form',
    { class: 'resolve', 'data-attempt': id, 'aria-label': `Resolve attempt ${attempt.number} of job ${attempt.jobId}` },
    el('label', { for: `status-${id}`, class: 'visually-hidden', text: 'Resolution' }),
    el(
      'select',
      { id: `status-${id}`, name: 'status' },
      el('option', { value: 'cancelled', text: 'cancelled: stop waiting' }),
      el('option', { value: 'failed', text: 'failed: did not happen' }),
    ),
    el('label', { for: `reason-${id}`, class: 'visually-hidden', text: 'Reason' }),
    el('input', { id: `reason-${id}`, name: 'reason', placeholder: 'reason (recorded)', required: true, maxlength: 500, size: 28 }),
    el('button', { type: 'submit', text: 'Resolve' }),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    form.querySelector('button').disabled = true;
    try {
      const { job } = await api(`/v1/attempts/${id}/resolve`, { method: 'POST', body: { status: data.get('status'), reason: String(data.get('reason')).trim() } });
      say(`Attempt ${attempt.number} of job ${job.id} resolved as ${data.get('status')}; the job is ${job.status}.`, 'info');
      await loadQueue();
    } catch (error) {
      form.querySelector('button').disabled = false;
      fail(error);
    }
  });
  return el(
    'tr',
    {},
    el('td', {}, el('a', { href: `#job/${attempt.jobId}`, class: 'mono', title: attempt.jobId, 'aria-label': `Job ${attempt.jobId}`, text: attempt.jobId.slice(0, 8) })),
    el('td', { text: attempt.owner }),
    el('td', { text: attempt.provider }),
    el('td', { text: String(attempt.number) }),
    el('td', { text: time(attempt.deadlineAt), title: attempt.deadlineAt }),
    el('td', { text: seconds(attempt.waitedSeconds) }),
    el('td', {}, form),
  );
}

$('#queue-filter').addEventListener('submit', (event) => {
  event.preventDefault();
  say('');
  loadQueue().catch(fail);
});
$('#queue-more').addEventListener('click', () => loadQueue(true).catch(fail));

// ---- job ----

$('#job-by-id').addEventListener('submit', (event) => {
  event.preventDefault();
  const id = new FormData(event.target).get('id').trim();
  if (id) location.hash = `#job/${encodeURIComponent(id)}`;
});

$('#job-by-key').addEventListener('submit', async (event) => {
  event.preventDefault();
  const data = new FormData(event.target);
  try {
    const params = new URLSearchParams({ owner: data.get('owner').trim(), idempotencyKey: data.get('idempotencyKey').trim(), limit: '1' });
    const page = await api(`/v1/ops/jobs?${params}`);
    if (!page.items.length) return say('No job of that owner has that idempotency key.');
    location.hash = `#job/${page.items[0].id}`;
  } catch (error) {
    fail(error);
  }
});

async function loadJob(id) {
  $('#job-id').value = id;
  const job = await api(`/v1/ops/jobs/${encodeURIComponent(id)}`);
  const events = [];
  let cursor = null;
  do {
    const page = await api(`/v1/jobs/${encodeURIComponent(id)}/events?limit=500${cursor ? `&cursor=${cursor}` : ''}`);
    events.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor && events.length < 5000);
  renderJob(job, events);
  // A live job changes under the operator's eyes: follow it until it settles.
  if (!TERMINAL.includes(job.status) && location.hash === `#job/${encodeURIComponent(id)}`) {
    refreshTimer = setTimeout(() => loadJob(id).catch(fail), 1000);
  }
}

function renderJob(job, events) {
  $('#job-detail').hidden = false;
  $('#job-detail-id').textContent = job.id;
  const summary = [
    ['Status', el('span', { class: `status status-${job.status}`, id: 'job-status', text: job.status })],
    ['Owner', job.owner],
    ['Idempotency key', job.idempotencyKey],
    ['Operation', job.operation],
    ['Providers', job.providers.join(' → ')],
    ['Version', String(job.version)],
    ['Won by', job.completedBy ? `attempt ${job.attempts.find((a) => a.id === job.completedBy)?.number ?? '?'}` : '–'],
    ['Created', dateTime(job.createdAt)],
    ['Completed', dateTime(job.completedAt)],
  ];
  $('#job-summary').replaceChildren(...summary.flatMap(([term, value]) => [el('dt', { text: term }), el('dd', {}, value)]));
  renderTimeline(job);
  $('#job-events tbody').replaceChildren(
    ...events.map((e) =>
      el(
        'tr',
        {},
        el('td', { text: time(e.at), title: e.at }),
        el('td', { text: e.subject === 'attempt' ? `attempt ${job.attempts.find((a) => a.id === e.attemptId)?.number ?? ''}` : 'job' }),
        el('td', { text: `${e.from ?? '∅'} → ${e.to}` }),
        el('td', { text: e.reason }),
        el('td', { text: e.actor ? `${e.actor.owner} (key ${e.actor.keyId.slice(0, 8)})` : 'service' }),
        el('td', { class: 'detail', text: e.detail ? JSON.stringify(e.detail) : '' }),
      ),
    ),
  );
}

/** One bar per attempt on a shared time axis: start to finish (or now), with its deadline marked. */
function renderTimeline(job) {
  const now = Date.now();
  const start = Math.min(...job.attempts.map((a) => Date.parse(a.startedAt)), Date.parse(job.createdAt));
  const end = Math.max(start + 1, ...job.attempts.map((a) => Math.max(a.finishedAt ? Date.parse(a.finishedAt) : now, Date.parse(a.deadlineAt))));
  const at = (iso) => `${(((Date.parse(iso) - start) / (end - start)) * 100).toFixed(2)}%`;
  const items = job.attempts.map((a) => {
    const finished = a.finishedAt ?? new Date(now).toISOString();
    const role = a.id === job.completedBy ? 'winner' : a.outcome === 'discarded' ? 'discarded' : a.status;
    const bar = el('span', { class: `bar bar-${role}` });
    bar.style.left = at(a.startedAt);
    bar.style.width = `max(2px, calc(${at(finished)} - ${at(a.startedAt)}))`;
    const deadline = el('span', { class: 'deadline', title: `deadline ${a.deadlineAt}` });
    deadline.style.left = at(a.deadlineAt);
    const duration = Date.parse(finished) - Date.parse(a.startedAt);
    const words = [
      `#${a.number} ${a.provider}`,
      role === 'winner' ? 'winner' : role === 'discarded' ? `discarded at ${time(a.finishedAt)}` : a.status,
      `${a.finishedAt ? 'took' : 'running for'} ${ms(duration)}`,
      `deadline ${time(a.deadlineAt)}`,
      a.error?.reason ? `reason ${a.error.reason}` : null,
    ].filter(Boolean);
    const track = el('span', { class: 'track', 'aria-hidden': 'true' }, bar, deadline);
    return el('li', { class: 'attempt', 'data-attempt': a.id }, el('span', { class: 'label', text: words.join(' · ') }), track);
  });
  $('#job-timeline').replaceChildren(...(items.length ? items : [el('li', { text: 'No attempt yet.' })]));
}

// ---- providers ----

async function loadProviders() {
  const [providers, operations, stats] = await Promise.all([api('/v1/providers'), api('/v1/operations'), api('/v1/ops/stats?minutes=60')]);
  const health = new Map(stats.providers.map((p) => [p.provider, p]));
  const counts = ['attempts', 'succeeded', 'failed', 'timeouts', 'unknownNow', 'discarded'];
  const countNames = { attempts: 'Calls', succeeded: 'Succeeded', failed: 'Failed', timeouts: 'Timeouts', unknownNow: 'Unknown now', discarded: 'Races lost' };
  $('#providers-table thead').replaceChildren(
    el(
      'tr',
      {},
      el('th', { scope: 'col', text: 'Provider' }),
      el('th', { scope: 'col', text: 'On timeout' }),
      ...operations.map((o) => el('th', { scope: 'col', text: `cert: ${o.name}` })),
      ...counts.map((c) => el('th', { scope: 'col', class: 'num', text: countNames[c] })),
      el('th', { scope: 'col', class: 'num', text: 'p95' }),
      el('th', { scope: 'col', class: 'num', text: 'In flight' }),
      el('th', { scope: 'col', text: 'Breaker' }),
    ),
  );
  $('#providers-table tbody').replaceChildren(
    ...providers.map((p) => {
      const h = health.get(p.name);
      return el(
        'tr',
        {},
        el('th', { scope: 'row' }, el('span', { text: p.name }), el('small', { text: ` ${p.kind}/${p.model}` })),
        el('td', { text: `${p.onTimeout} (${ms(p.timeoutMs)})` }),
        ...operations.map((o) => {
          const cert = p.certifications.find((c) => c.operation === o.name);
          const state = !cert ? 'none' : !cert.passed ? 'failed' : cert.current ? 'current' : 'stale';
          return el('td', {}, el('span', { class: `cert cert-${state}`, title: cert ? `certified ${cert.certifiedAt}` : 'never certified', text: state }));
        }),
        ...counts.map((c) => el('td', { class: 'num', text: String(h?.[c] ?? 0) })),
        el('td', { class: 'num', text: h?.latencyP95Ms == null ? '–' : ms(h.latencyP95Ms) }),
        el('td', { class: 'num', text: capacityText(p.capacity) }),
        el('td', {}, el('span', { class: `breaker breaker-${p.capacity.breaker.state}`, title: breakerTitle(p.capacity), text: breakerText(p.capacity) })),
      );
    }),
  );
}

/** "3 / 50" with a cap; a pause asked for by the provider's 429 is shown next to it. */
function capacityText(c) {
  const inFlight = c.maxConcurrency == null ? String(c.inFlight) : `${c.inFlight} / ${c.maxConcurrency}`;
  return c.pausedUntil ? `${inFlight} (paused until ${new Date(c.pausedUntil).toLocaleTimeString()})` : inFlight;
}

function breakerText(c) {
  return c.breaker.state.replace('_', '-');
}

function breakerTitle(c) {
  const since = c.breaker.since ? ` since ${c.breaker.since}` : '';
  const rate = c.requestsPerMinute == null ? '' : `; ${c.requestsThisMinute}/${c.requestsPerMinute} requests this minute`;
  return `${c.breaker.failuresInWindow} failures in the window${since}${rate}`;
}

// ---- activity ----

const charts = [];

async function loadActivity() {
  const stats = await api('/v1/ops/stats?minutes=60');
  for (const chart of charts.splice(0)) chart.destroy();
  const xs = stats.perMinute.map((m) => Date.parse(m.at) / 1000);
  const col = (name) => stats.perMinute.map((m) => m[name]);
  const width = Math.max(600, $('#screen-activity').clientWidth - 16);
  const uPlot = window.uPlot;
  if (!uPlot) return say('The chart library did not load.');
  charts.push(
    new uPlot(
      {
        width,
        height: 220,
        scales: { x: { time: true } },
        series: [
          {},
          { label: 'created', stroke: '#1f5fbf', width: 2, points: { show: false } },
          { label: 'succeeded', stroke: '#1b7f3b', width: 2, points: { show: false } },
          { label: 'failed', stroke: '#b3261e', width: 2, points: { show: false } },
          { label: 'cancelled', stroke: '#7a5c00', width: 2, dash: [4, 4], points: { show: false } },
        ],
        axes: [{}, { label: 'jobs / min' }],
      },
      [xs, col('created'), col('succeeded'), col('failed'), col('cancelled')],
      $('#chart-jobs'),
    ),
    new uPlot(
      {
        width,
        height: 220,
        scales: { x: { time: true } },
        series: [{}, { label: 'p50 ms', stroke: '#1f5fbf', width: 2, spanGaps: true }, { label: 'p95 ms', stroke: '#b3261e', width: 2, spanGaps: true }],
        axes: [{}, { label: 'ms' }],
      },
      [xs, col('latencyP50Ms'), col('latencyP95Ms')],
      $('#chart-latency'),
    ),
  );
  const sum = (name) => col(name).reduce((a, b) => a + b, 0);
  $('#activity-totals').textContent =
    `Last hour: ${sum('created')} created, ${sum('succeeded')} succeeded, ${sum('failed')} failed, ` +
    `${sum('cancelled')} cancelled; ${sum('attempts')} attempts answered.`;
}

showKeyStatus();
route();
