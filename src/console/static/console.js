// The operator console: plain DOM, no framework. The credential is a token from the company's identity provider
// (signed in with the authorization code flow and PKCE, kept in memory only) or a pasted API key (kept in
// sessionStorage, gone with the tab); either travels only in the Authorization header: never in a URL, never in a
// cookie. Live streams go through the browser's EventSource with a stream token made for that one stream.
// Everything shown comes from the /v1 API.

const KEY_STORAGE = 'onejob.apiKey';
const SIGN_IN_STORAGE = 'onejob.signIn';
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

/** The signed-in token: in memory only (a reload signs in again, silently while the IdP's session lasts). */
let signedIn = null;
const key = () => signedIn?.token ?? sessionStorage.getItem(KEY_STORAGE);

class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail ?? `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code ?? 'http_error';
  }
}

async function api(path, { method = 'GET', body } = {}) {
  if (!key()) throw new ApiError(401, { code: 'unauthorized', detail: 'Sign in or paste an API key first.' });
  const headers = { Authorization: `Bearer ${key()}`, Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit',
    cache: 'no-store',
  });
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
  const hint =
    error.code === 'token_expired' && signedIn
      ? ' (your sign-in ended: sign in again)'
      : error.status === 401
        ? ' (is the key right, and not revoked or expired?)'
        : error.status === 403
          ? ' (the key lacks a scope)'
          : '';
  say(`${error.message}${hint} [${error.code ?? 'error'}]`);
}

// One time format everywhere, charts included: 24 h, ISO-like, in UTC and saying so. Operators hold these times
// against logs and providers' consoles, which are in UTC; a locale's format mixed 12 h and 24 h.
const isoOf = (value) => new Date(value).toISOString();
const time = (value) => (value == null ? '–' : `${isoOf(value).slice(11, 19)} UTC`);
const dateTime = (value) => (value == null ? '–' : `${isoOf(value).slice(0, 10)} ${isoOf(value).slice(11, 19)} UTC`);
function seconds(total) {
  if (total < 60) return `${total} s`;
  if (total < 3600) return `${Math.floor(total / 60)} min ${total % 60} s`;
  return `${Math.floor(total / 3600)} h ${Math.floor((total % 3600) / 60)} min`;
}
const ms = (value) => (value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(1)} s`);

// ---- key ----

function showKeyStatus() {
  $('#key-status').textContent = signedIn
    ? `Signed in as ${signedIn.owner} until ${time(signedIn.expiresAt)} (the token is kept in this page only).`
    : key()
      ? 'A key is set for this tab (kept in sessionStorage until the tab closes).'
      : 'No key: paste an operator key (scopes ops:read, attempts:resolve).';
}

// ---- sign-in with the identity provider (authorization code + PKCE, RFC 7636) ----

const base64url = (bytes) =>
  btoa(String.fromCharCode(...new Uint8Array(bytes)))
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '');
const randomText = () => base64url(crypto.getRandomValues(new Uint8Array(32)));
const redirectUri = () => `${location.origin}/console/`;
let signInConfig = null;

/** What the service says about signing in: the issuer, the console's client id, its endpoints (discovery). */
async function loadSignIn() {
  const res = await fetch('/console/config.json', { credentials: 'omit', cache: 'no-store' }).catch(() => null);
  const config = res?.ok ? await res.json() : null;
  signInConfig = config?.signIn ?? null;
  const button = $('#sign-in');
  button.hidden = !signInConfig;
  if (signInConfig?.error) {
    button.disabled = true;
    say(`Sign-in is configured but unavailable: ${signInConfig.error}. Paste an API key meanwhile.`);
  }
}

$('#sign-in').addEventListener('click', async () => {
  if (!signInConfig?.authorizationEndpoint) return;
  const verifier = randomText();
  const state = randomText();
  const challenge = base64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
  // The verifier must outlive the trip to the IdP and back: the tab's sessionStorage, removed on return.
  sessionStorage.setItem(SIGN_IN_STORAGE, JSON.stringify({ verifier, state, hash: location.hash }));
  const url = new URL(signInConfig.authorizationEndpoint);
  url.search = new URLSearchParams({
    response_type: 'code',
    client_id: signInConfig.clientId,
    redirect_uri: redirectUri(),
    scope: signInConfig.scope,
    state,
    code_challenge: challenge,
    code_challenge_method: 'S256',
  }).toString();
  location.assign(url.href);
});

/** Back from the IdP with ?code=&state=: trades the code (and the verifier) for a token, kept in memory. */
async function finishSignIn() {
  const params = new URLSearchParams(location.search);
  if (!params.has('code') && !params.has('error')) return;
  const pending = JSON.parse(sessionStorage.getItem(SIGN_IN_STORAGE) ?? 'null');
  sessionStorage.removeItem(SIGN_IN_STORAGE);
  // The code leaves the address bar (and the history) at once.
  history.replaceState(null, '', `/console/${pending?.hash ?? ''}`);
  if (params.has('error')) return say(`Sign-in refused by the identity provider: ${params.get('error')}`);
  if (!pending || pending.state !== params.get('state') || !signInConfig?.tokenEndpoint) {
    return say('Sign-in failed: the answer does not match a sign-in started here. Try again.');
  }
  const res = await fetch(signInConfig.tokenEndpoint, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code: params.get('code'),
      redirect_uri: redirectUri(),
      client_id: signInConfig.clientId,
      code_verifier: pending.verifier,
    }),
    credentials: 'omit',
    cache: 'no-store',
  }).catch(() => null);
  const answer = res?.ok ? await res.json().catch(() => null) : null;
  if (!answer?.access_token) return say('Sign-in failed: the identity provider gave no token.');
  const claims = JSON.parse(atob(answer.access_token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/')));
  signedIn = {
    token: answer.access_token,
    owner: claims.preferred_username ?? claims.sub ?? 'you',
    expiresAt: Date.now() + (answer.expires_in ?? 300) * 1000,
  };
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
  signedIn = null;
  showKeyStatus();
  say('Key forgotten.', 'info');
});

// ---- screens ----

let queueTimer;

const screenOf = () => {
  const screen = (location.hash.slice(1) || 'queue').split('/')[0];
  return ['queue', 'job', 'batches', 'providers', 'owners', 'activity'].includes(screen) ? screen : 'queue';
};

async function route() {
  stopLive();
  clearTimeout(queueTimer);
  const name = screenOf();
  const arg = location.hash.slice(1).split('/')[1];
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
    if (name === 'batches') await loadBatches(arg && decodeURIComponent(arg));
    if (name === 'providers') await loadProviders();
    if (name === 'owners') await loadOwners();
    if (name === 'activity') await loadActivity();
  } catch (error) {
    fail(error);
  }
}

window.addEventListener('hashchange', () => {
  say('');
  route().then(() => $('main').focus({ preventScroll: true }));
});

// A hidden tab polls nothing; coming back shows the queue as it is now.
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible' && key() && screenOf() === 'queue') loadQueue().catch(fail);
});

/**
 * Puts `nodes` in `parent` in this order, moving only what is out of place: a row being typed into keeps its
 * focus and its text across refreshes.
 */
function reconcile(parent, nodes) {
  const keep = new Set(nodes);
  for (const child of [...parent.children]) if (!keep.has(child)) child.remove();
  let cursor = parent.firstElementChild;
  for (const node of nodes) {
    if (node === cursor) cursor = cursor.nextElementSibling;
    else parent.insertBefore(node, cursor);
  }
}

// ---- what resolving does ----

/** The catalog with its certifications, read at most every 10 s: the queue and a live job poll far more often. */
let catalogRead = { at: 0, providers: undefined };
async function providerCatalog() {
  if (Date.now() - catalogRead.at > 10_000 || !catalogRead.providers) {
    catalogRead = { at: Date.now(), providers: await api('/v1/providers').catch(() => undefined) };
  }
  return catalogRead.providers;
}

/**
 * The provider the job goes on to once its unknown attempt is resolved, either way (the service's planner): the
 * next provider of its chain after the attempt's that is in the catalog and certified for the operation.
 * Undefined when none is left: the job then fails.
 */
function nextCertified(chain, after, operation, providers) {
  const byName = new Map(providers.map((p) => [p.name, p]));
  for (let i = chain.indexOf(after) + 1; i < chain.length; i += 1) {
    const candidate = byName.get(chain[i]);
    const certified = candidate?.certifications.some((c) => c.operation === operation && c.certified);
    if (candidate && (i === 0 || certified)) return candidate.name;
  }
  return undefined;
}

function effectText(chain, attempt, operation, providers) {
  if (!chain || !providers) {
    return "Either way: the job's next certified provider takes over, or the job fails when none is left.";
  }
  const next = nextCertified(chain, attempt.provider, operation, providers);
  return next
    ? `Either way: ${next} takes over (the next certified provider of the job's chain).`
    : 'Either way: the job fails now (no certified provider is left in its chain), and a late result is discarded.';
}

/**
 * The resolve form of one unknown attempt; `done` runs after the service accepted it. `place` keeps its ids apart
 * from the same attempt's form on the other screen (both stay in the document).
 */
function resolveForm(attempt, jobId, place, done) {
  const id = `${place}-${attempt.id}`;
  const form = el(
    'form',
    { class: 'resolve', 'data-attempt': attempt.id, 'aria-label': `Resolve attempt ${attempt.number} of job ${jobId}` },
    el('label', { for: `status-${id}`, class: 'visually-hidden', text: 'Resolution' }),
    el(
      'select',
      { id: `status-${id}`, name: 'status' },
      el('option', {
        value: 'cancelled',
        text: 'cancelled: stop waiting (a late result may still win while the job is open)',
      }),
      el('option', { value: 'failed', text: 'failed: the work did not happen (a late result is discarded)' }),
    ),
    el('label', { for: `reason-${id}`, class: 'visually-hidden', text: 'Reason' }),
    el('input', {
      id: `reason-${id}`,
      name: 'reason',
      placeholder: 'reason (recorded)',
      required: true,
      maxlength: 500,
    }),
    el('button', { type: 'submit', text: 'Resolve' }),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      const status = data.get('status');
      const body = { status, reason: String(data.get('reason')).trim() };
      const { job } = await api(`/v1/attempts/${attempt.id}/resolve`, { method: 'POST', body });
      say(`Attempt ${attempt.number} of job ${job.id} resolved as ${status}; the job is ${job.status}.`, 'info');
      await done(job);
    } catch (error) {
      button.disabled = false;
      fail(error);
    }
  });
  return form;
}

// ---- queue ----

/** Every few seconds while the queue is on screen and the tab visible: attempts go unknown and get resolved. */
const QUEUE_POLL_MS = 4000;
let queueItems = [];
let queueCursor = null;
/** One row per attempt, kept across refreshes (a reason being typed survives them). */
const queueRows = new Map();
/** A job's provider chain never changes: read once per job. */
const chains = new Map();

let queueRun = 0;

async function loadQueue(more = false) {
  clearTimeout(queueTimer);
  const run = (queueRun += 1);
  let refused = false;
  try {
    const filter = new FormData($('#queue-filter'));
    const params = new URLSearchParams({ status: 'unknown' });
    if (filter.get('provider')) params.set('provider', String(filter.get('provider')).trim());
    if (filter.get('olderThan')) params.set('olderThan', String(filter.get('olderThan')));
    const providers = providerCatalog();
    let items = more ? queueItems : [];
    let cursor = more ? queueCursor : null;
    // A refresh reads again as many rows as are shown (at least one page).
    const wanted = more ? queueItems.length + 50 : Math.max(50, queueItems.length);
    do {
      const limit = Math.min(100, wanted - items.length);
      const page = await api(`/v1/ops/attempts?${params}&limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`);
      items = items.concat(page.items);
      cursor = page.nextCursor;
    } while (cursor && items.length < wanted);
    await Promise.all(
      [...new Set(items.map((a) => a.jobId))]
        .filter((jobId) => !chains.has(jobId))
        .map((jobId) =>
          api(`/v1/ops/jobs/${jobId}`).then(
            (job) => chains.set(jobId, job.providers),
            () => undefined,
          ),
        ),
    );
    const known = await providers;
    if (run === queueRun) {
      queueItems = items;
      queueCursor = cursor;
      renderQueue(items, known);
    }
  } catch (error) {
    refused = error.status === 401 || error.status === 403;
    throw error;
  } finally {
    // Polls until the key is refused or the operator leaves the screen; a newer load schedules its own poll.
    if (run === queueRun && !refused && screenOf() === 'queue' && key()) {
      queueTimer = setTimeout(() => {
        if (document.visibilityState === 'visible') loadQueue().catch(queueFailed);
        else queueTimer = undefined;
      }, QUEUE_POLL_MS);
    }
  }
}

const queueFailed = (error) => fail(error);

function renderQueue(items, providers) {
  const ids = new Set(items.map((a) => a.attemptId));
  for (const id of queueRows.keys()) if (!ids.has(id)) queueRows.delete(id);
  const rows = items.map((attempt) => {
    let row = queueRows.get(attempt.attemptId);
    if (!row) queueRows.set(attempt.attemptId, (row = queueRow(attempt)));
    row.querySelector('.waited').textContent =
      `${seconds(attempt.waitedSeconds)} (since ${time(attempt.waitingSince)})`;
    row.querySelector('.effect').textContent = effectText(
      chains.get(attempt.jobId),
      attempt,
      attempt.operation,
      providers,
    );
    return row;
  });
  const body = $('#queue-table tbody');
  reconcile(body, rows);
  $('#queue-more').hidden = !queueCursor;
  $('#queue-empty').hidden = rows.length > 0;
  $('#queue-table').hidden = rows.length === 0;
}

function queueRow(attempt) {
  const form = resolveForm({ id: attempt.attemptId, number: attempt.number }, attempt.jobId, 'queue', () =>
    loadQueue(),
  );
  // data-label names each cell where a narrow screen stacks the row (console.css).
  const cell = (label, attrs, ...children) => el('td', { 'data-label': label, ...attrs }, ...children);
  return el(
    'tr',
    { 'data-attempt': attempt.attemptId },
    cell(
      'Job',
      {},
      el('a', {
        href: `#job/${attempt.jobId}`,
        class: 'mono',
        title: attempt.jobId,
        'aria-label': `Job ${attempt.jobId}`,
        text: attempt.jobId.slice(0, 8),
      }),
    ),
    cell(
      'Attempt',
      { class: 'mono attempt-id' },
      el('span', { text: `#${attempt.number} ${attempt.attemptId}` }),
      attempt.providerRequestId ? el('small', { text: ` provider's id ${attempt.providerRequestId}` }) : null,
    ),
    cell('Owner', { text: attempt.owner }),
    cell('Operation', { text: attempt.operation }),
    cell('Provider', { text: attempt.provider }),
    cell('Deadline', { class: 'time', text: time(attempt.deadlineAt), title: attempt.deadlineAt }),
    cell('Unknown for', { class: 'waited' }),
    cell('If resolved', { class: 'effect' }),
    cell('Resolve', {}, form),
  );
}

$('#queue-filter').addEventListener('submit', (event) => {
  event.preventDefault();
  say('');
  loadQueue().catch(queueFailed);
});
$('#queue-more').addEventListener('click', () => loadQueue(true).catch(queueFailed));

// ---- job ----

$('#job-by-id').addEventListener('submit', (event) => {
  event.preventDefault();
  const id = new FormData(event.target).get('id').trim();
  if (!id) return;
  const hash = `#job/${encodeURIComponent(id)}`;
  if (location.hash === hash) route();
  else location.hash = hash;
});

$('#job-by-key').addEventListener('submit', async (event) => {
  event.preventDefault();
  const data = new FormData(event.target);
  try {
    const params = new URLSearchParams({
      owner: data.get('owner').trim(),
      idempotencyKey: data.get('idempotencyKey').trim(),
      limit: '1',
    });
    const page = await api(`/v1/ops/jobs?${params}`);
    if (!page.items.length) {
      clearJob();
      return say('No job of that owner has that idempotency key.');
    }
    location.hash = `#job/${page.items[0].id}`;
  } catch (error) {
    clearJob();
    fail(error);
  }
});

/** The attempts' rows and resolve forms of the job on screen, kept across its refreshes (see reconcile). */
const attemptRows = new Map();
const attemptForms = new Map();
let shownJobId = null;

/** Nothing of a previous job stays on screen once another was asked for and could not be shown. */
function clearJob() {
  stopLive();
  shownJobId = null;
  attemptRows.clear();
  attemptForms.clear();
  $('#job-detail').hidden = true;
  $('#job-detail-id').textContent = '';
  $('#job-summary').replaceChildren();
  $('#job-timeline').replaceChildren();
  $('#job-events tbody').replaceChildren();
}

async function loadJob(id) {
  stopLive();
  const hash = `#job/${encodeURIComponent(id)}`;
  $('#job-id').value = id;
  try {
    const [job, providers] = await Promise.all([api(`/v1/ops/jobs/${encodeURIComponent(id)}`), providerCatalog()]);
    const events = [];
    let cursor = null;
    do {
      const page = await api(`/v1/jobs/${encodeURIComponent(id)}/events?limit=500${cursor ? `&cursor=${cursor}` : ''}`);
      events.push(...page.items);
      cursor = page.nextCursor;
    } while (cursor && events.length < 5000);
    // The operator asked for another job meanwhile: this answer is stale.
    if (location.hash !== hash) return;
    renderJob(job, events, providers);
    // A live job changes under the operator's eyes: its timeline is streamed as it commits (and a late discarded
    // result after it settled); the page redraws once a second meanwhile, for what time alone changes (deadlines).
    followJob(job, events, providers, hash);
  } catch (error) {
    if (location.hash === hash) clearJob();
    throw error;
  }
}

// ---- live timeline ----

let live = null;

function stopLive() {
  if (!live) return;
  live.source?.close();
  live.stopped = true;
  clearInterval(live.tick);
  clearTimeout(live.reread);
  clearTimeout(live.reopen);
  live = null;
}

const EVENT_KINDS = ['pending', 'running', 'unknown', 'succeeded', 'failed', 'cancelled', 'starting'].flatMap((to) => [
  `job.${to}`,
  `attempt.${to}`,
]);

/**
 * Follows the job's timeline live with the browser's own EventSource: it cannot send the Authorization header, so
 * it opens the URL of a stream token made for this one job (POST /v1/jobs/{id}/stream-tokens), and resumes by
 * itself with Last-Event-ID after a drop. When the service closes the stream (the job is over, or the stream
 * token's 15 minutes are up) a new token reopens it after the last event while the job lives, and once more after
 * it settled (for a late discarded result). Each event re-reads the job (its attempts) and redraws.
 */
function followJob(job, events, providers, hash) {
  stopLive();
  const state = { job, source: null, stopped: false, tick: undefined, reread: undefined, reopen: undefined };
  live = state;
  const current = () => live === state && !state.stopped && location.hash === hash;
  state.tick = setInterval(() => current() && renderJob(state.job, events, providers), 1000);
  const reread = () => {
    clearTimeout(state.reread);
    state.reread = setTimeout(async () => {
      const fresh = await api(`/v1/ops/jobs/${encodeURIComponent(job.id)}`).catch(() => null);
      if (fresh && current()) {
        state.job = fresh;
        renderJob(fresh, events, providers);
      }
    }, 100);
  };
  let lastId = events.at(-1)?.id;
  const open = async (afterSettled) => {
    const minted = await api(`/v1/jobs/${encodeURIComponent(job.id)}/stream-tokens`, { method: 'POST' }).catch(
      () => null,
    );
    if (!current()) return;
    // Refused or unanswered (a database restarting): try again, as EventSource itself does after a drop.
    if (!minted) return void (state.reopen = setTimeout(() => current() && open(afterSettled), 1000));
    const source = new EventSource(lastId ? `${minted.url}&lastEventId=${lastId}` : minted.url);
    state.source = source;
    let received = 0;
    const onMessage = (message) => {
      if (!current()) return source.close();
      received++;
      if (events.some((e) => e.id === message.lastEventId)) return;
      events.push(JSON.parse(message.data));
      lastId = message.lastEventId;
      reread();
    };
    for (const kind of EVENT_KINDS) source.addEventListener(kind, onMessage);
    source.addEventListener('error', async () => {
      // A drop is retried by EventSource itself; a refusal or the end (401, 204) closes it.
      if (source.readyState !== EventSource.CLOSED || !current()) return;
      // The job as it is now decides: the stream may have closed before its last event was drawn.
      const fresh = await api(`/v1/ops/jobs/${encodeURIComponent(job.id)}`).catch(() => null);
      if (!current()) return;
      if (fresh) {
        state.job = fresh;
        renderJob(fresh, events, providers);
      }
      const settled = ['succeeded', 'failed', 'cancelled'].includes(state.job.status);
      if (settled && (afterSettled || !received)) return;
      state.reopen = setTimeout(() => current() && open(settled), 1000);
    });
  };
  void open(false);
}

/** Who acted on an event: the service, a key (its id's start), or a token's subject at its issuer. */
function actorText(actor) {
  if (!actor) return 'service';
  if (actor.keyId) return `${actor.owner} (key ${actor.keyId.slice(0, 8)})`;
  return `${actor.owner} (${actor.subject ?? 'token'} at ${new URL(actor.issuer).host})`;
}

function renderJob(job, events, providers) {
  if (shownJobId !== job.id) {
    attemptRows.clear();
    attemptForms.clear();
    shownJobId = job.id;
  }
  $('#job-detail').hidden = false;
  $('#job-detail-id').textContent = job.id;
  const winner = job.attempts.find((a) => a.id === job.completedBy);
  const summary = [
    ['Status', el('span', { class: `status status-${job.status}`, id: 'job-status', text: job.status })],
    ['Owner', job.owner],
    ['Idempotency key', job.idempotencyKey],
    ['Operation', job.operation],
    ['Providers', job.providers.join(' → ')],
    ['Version', String(job.version)],
    ['Won by', job.completedBy ? `attempt ${winner?.number ?? '?'}` : '–'],
    ['Created', dateTime(job.createdAt)],
    ['Completed', dateTime(job.completedAt)],
  ];
  $('#job-summary').replaceChildren(
    ...summary.flatMap(([term, value]) => [el('dt', { text: term }), el('dd', {}, value)]),
  );
  renderTimeline(job, events, providers);
  const attemptOf = (e) => job.attempts.find((a) => a.id === e.attemptId);
  $('#job-events tbody').replaceChildren(
    ...events.map((e) =>
      el(
        'tr',
        {},
        el('td', { class: 'time', text: time(e.at), title: e.at }),
        el('td', { text: e.subject === 'attempt' ? `attempt ${attemptOf(e)?.number ?? ''}` : 'job' }),
        el('td', { text: `${e.from ?? '∅'} → ${e.to}` }),
        el('td', { text: e.reason + operatorWords(e, attemptOf(e)) }),
        el('td', { text: actorText(e.actor) }),
        el('td', { class: 'detail', text: e.detail ? JSON.stringify(e.detail) : '' }),
      ),
    ),
  );
}

/** The reason an operator typed when resolving: kept in the attempt's error, shown where the resolution is. */
const typedReason = (attempt) =>
  attempt?.error?.reason === 'resolved_by_operator' && attempt.error.message ? attempt.error.message : null;
const operatorWords = (event, attempt) =>
  event.subject === 'attempt' && event.reason === 'resolved_by_operator' && typedReason(attempt)
    ? `: “${typedReason(attempt)}”`
    : '';

/**
 * What became of an attempt, in words that hold whatever its state: a discarded result says when it arrived (its
 * event: the attempt's finishedAt is when the service gave up on it), an unknown attempt since when it is unknown.
 */
function attemptWords(a, job, events, provider, now) {
  const mine = events.filter((e) => e.attemptId === a.id);
  const lastEvent = (test) => mine.filter(test).at(-1);
  const started = Date.parse(a.startedAt);
  const words = [`#${a.number} ${a.provider}`];
  const resolved = lastEvent((e) => e.reason === 'resolved_by_operator');
  const byOperator = () => {
    const who = resolved.actor ? `by ${resolved.actor.owner}` : 'by an operator';
    return [`${resolved.to} ${who} at ${time(resolved.at)}`, typedReason(a) ? `“${typedReason(a)}”` : null];
  };
  if (a.id === job.completedBy) {
    words.push('winner', `took ${ms((a.finishedAt ? Date.parse(a.finishedAt) : now) - started)}`);
  } else if (a.outcome === 'discarded') {
    const arrived = lastEvent((e) => e.reason === 'result_discarded');
    const tookMs = arrived ? Date.parse(arrived.at) - started : null;
    words.push(
      'discarded',
      arrived ? `result arrived at ${time(arrived.at)}, took ${ms(tookMs)}` : 'its result arrived too late',
    );
    const gaveUp = lastEvent((e) => e !== arrived && (e.to === 'cancelled' || e.to === 'failed'));
    if (resolved) words.push(...byOperator());
    else if (gaveUp) words.push(`given up at ${time(a.finishedAt ?? gaveUp.at)} (${gaveUp.reason})`);
  } else if (a.status === 'unknown') {
    const since = lastEvent((e) => e.to === 'unknown');
    words.push(`unknown since ${time(since?.at ?? a.deadlineAt)}`, `deadline passed at ${time(a.deadlineAt)}`);
    if (provider) {
      // The worker keeps listening until the provider's hard timeout: a result may still settle the job until then.
      const hard = started + provider.hardTimeoutMs;
      words.push(
        now < hard
          ? `a late result may still arrive until ${time(hard)}`
          : `no result by its hard timeout at ${time(hard)}`,
      );
    }
    if (a.providerRequestId && !['expired', 'unknowable'].includes(a.providerStatus)) {
      words.push(`the provider says ${a.providerStatus ?? 'queued'}: looked up by its id each reconcile period`);
    } else {
      if (a.providerStatus === 'expired') words.push('the provider no longer knows its id (past its retention)');
      if (a.providerStatus === 'unknowable') words.push('the create call never returned an id: unknowable');
      words.push('waiting for an operator');
    }
    return words;
  } else if (a.status === 'starting' || a.status === 'running') {
    const passed = now > Date.parse(a.deadlineAt) ? 'passed at ' : '';
    words.push(`${a.status} for ${ms(now - started)}`, `deadline ${passed}${time(a.deadlineAt)}`);
    return words;
  } else if (resolved) {
    words.push(...byOperator());
  } else if (a.status === 'cancelled') {
    words.push('cancelled', `given up at ${time(a.finishedAt)}`, a.error?.reason ? `reason ${a.error.reason}` : null);
  } else {
    const took = a.finishedAt ? `took ${ms(Date.parse(a.finishedAt) - started)}` : null;
    words.push(a.status, took, a.error?.reason ? `reason ${a.error.reason}` : null);
  }
  // How an unknown attempt ended: its provider's record (a look-up), an operator, or the service's deadlines.
  if (a.resolvedBy) words.push(UNKNOWN_ENDED[a.resolvedBy] ?? `unknown, ended by ${a.resolvedBy}`);
  words.push(`deadline ${time(a.deadlineAt)}`);
  return words;
}

const UNKNOWN_ENDED = {
  provider: 'was unknown: resolved by looking it up at the provider',
  operator: 'was unknown: resolved by an operator',
  deadline: 'was unknown: ended by the deadline (failover, or its own late answer)',
};

/** One bar per attempt on a shared time axis: start to its result (or now), with its deadline marked. */
function renderTimeline(job, events, providers) {
  const now = Date.now();
  // A discarded result's call ended when it arrived, after the attempt's finishedAt (when it was given up on).
  const endOf = (a) => {
    const arrived =
      a.outcome === 'discarded' && events.filter((e) => e.attemptId === a.id && e.reason === 'result_discarded').at(-1);
    return arrived ? Date.parse(arrived.at) : a.finishedAt ? Date.parse(a.finishedAt) : now;
  };
  const start = Math.min(...job.attempts.map((a) => Date.parse(a.startedAt)), Date.parse(job.createdAt));
  const end = Math.max(start + 1, ...job.attempts.map((a) => Math.max(endOf(a), Date.parse(a.deadlineAt))));
  const at = (t) => `${(((t - start) / (end - start)) * 100).toFixed(2)}%`;
  const items = job.attempts.map((a) => {
    let row = attemptRows.get(a.id);
    if (!row) {
      row = el(
        'li',
        { class: 'attempt', 'data-attempt': a.id },
        el('span', { class: 'label' }),
        el(
          'span',
          { class: 'track', 'aria-hidden': 'true' },
          el('span', { class: 'bar' }),
          el('span', { class: 'deadline' }),
        ),
        el('div', { class: 'actions' }),
      );
      attemptRows.set(a.id, row);
    }
    const role = a.id === job.completedBy ? 'winner' : a.outcome === 'discarded' ? 'discarded' : a.status;
    const bar = row.querySelector('.bar');
    bar.className = `bar bar-${role}`;
    bar.style.left = at(Date.parse(a.startedAt));
    bar.style.width = `max(2px, calc(${at(endOf(a))} - ${at(Date.parse(a.startedAt))}))`;
    const deadline = row.querySelector('.deadline');
    deadline.title = `deadline ${time(a.deadlineAt)}`;
    deadline.style.left = at(Date.parse(a.deadlineAt));
    const provider = providers?.find((p) => p.name === a.provider);
    row.querySelector('.label').textContent = attemptWords(a, job, events, provider, now).filter(Boolean).join(' · ');
    const actions = row.querySelector('.actions');
    if (a.status === 'unknown') {
      let form = attemptForms.get(a.id);
      if (!form) {
        form = resolveForm(a, job.id, 'job', () => loadJob(job.id));
        attemptForms.set(a.id, form);
        actions.replaceChildren(el('p', { class: 'effect' }), form);
      }
      actions.querySelector('.effect').textContent = effectText(job.providers, a, job.operation, providers);
    } else if (actions.firstChild) {
      attemptForms.delete(a.id);
      actions.replaceChildren();
    }
    return row;
  });
  const timeline = $('#job-timeline');
  if (items.length) reconcile(timeline, items);
  else timeline.replaceChildren(el('li', { text: 'No attempt yet.' }));
}

// ---- providers ----

async function loadProviders() {
  const [providers, operations, stats] = await Promise.all([
    api('/v1/providers'),
    api('/v1/operations'),
    api('/v1/ops/stats?minutes=60'),
  ]);
  const health = new Map(stats.providers.map((p) => [p.provider, p]));
  const counts = ['attempts', 'succeeded', 'failed', 'timeouts', 'unknownNow', 'discarded'];
  const countNames = {
    attempts: 'Calls',
    succeeded: 'Succeeded',
    failed: 'Failed',
    timeouts: 'Timeouts',
    unknownNow: 'Unknown now',
    discarded: 'Races lost',
  };
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
          return el(
            'td',
            {},
            el('span', {
              class: `cert cert-${state}`,
              title: cert ? `certified ${dateTime(cert.certifiedAt)}` : 'never certified',
              text: state,
            }),
          );
        }),
        ...counts.map((c) => el('td', { class: 'num', text: String(h?.[c] ?? 0) })),
        el('td', { class: 'num', text: h?.latencyP95Ms == null ? '–' : ms(h.latencyP95Ms) }),
        el('td', { class: 'num', text: capacityText(p.capacity) }),
        el(
          'td',
          {},
          el('span', {
            class: `breaker breaker-${p.capacity.breaker.state}`,
            title: breakerTitle(p.capacity),
            text: breakerText(p.capacity),
          }),
        ),
      );
    }),
  );
}

/** "3 / 50" with a cap; a pause asked for by the provider's 429 is shown next to it. */
function capacityText(c) {
  const inFlight = c.maxConcurrency == null ? String(c.inFlight) : `${c.inFlight} / ${c.maxConcurrency}`;
  return c.pausedUntil ? `${inFlight} (paused until ${time(c.pausedUntil)})` : inFlight;
}

function breakerText(c) {
  return c.breaker.state.replace('_', '-');
}

function breakerTitle(c) {
  const since = c.breaker.since ? ` since ${dateTime(c.breaker.since)}` : '';
  const rate =
    c.requestsPerMinute == null ? '' : `; ${c.requestsThisMinute}/${c.requestsPerMinute} requests this minute`;
  return `${c.breaker.failuresInWindow} failures in the window${since}${rate}`;
}

// ---- owners ----

async function loadOwners() {
  const page = await api('/v1/ops/owners?limit=200');
  const rows = page.items.map((o) =>
    el(
      'tr',
      {},
      el('th', { scope: 'row', 'data-label': 'Owner', text: o.ownerId }),
      el('td', { class: 'num', 'data-label': 'Queued', text: String(o.queued) }),
      el('td', { class: 'num', 'data-label': 'In flight', text: String(o.inFlight) }),
      el('td', { class: 'num', 'data-label': 'Unknown', text: String(o.unknown) }),
      el('td', { class: 'num', 'data-label': 'Weight', text: String(o.weight) }),
      el('td', {
        class: 'num',
        'data-label': 'Max concurrency',
        text: o.maxConcurrency == null ? '–' : String(o.maxConcurrency),
      }),
    ),
  );
  $('#owners-table tbody').replaceChildren(
    ...(rows.length ? rows : [el('tr', {}, el('td', { colspan: '6', text: 'No owner has live jobs.' }))]),
  );
}

// ---- activity ----

const charts = [];

/** The charts' time axis and legend in the page's format: UTC, 24 h (uPlot's own default is 12 h, local). */
const minuteOf = (seconds) => isoOf(seconds * 1000).slice(11, 16);
const timeAxis = () => ({
  tzDate: (ts) => window.uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
  x: { value: (u, v) => (v == null ? '–' : `${isoOf(v * 1000).slice(0, 10)} ${minuteOf(v)} UTC`) },
  axis: { label: 'UTC', values: (u, splits) => splits.map(minuteOf) },
});

async function loadActivity() {
  const stats = await api('/v1/ops/stats?minutes=60');
  for (const chart of charts.splice(0)) chart.destroy();
  const xs = stats.perMinute.map((m) => Date.parse(m.at) / 1000);
  const col = (name) => stats.perMinute.map((m) => m[name]);
  // As wide as the screen allows, down to a phone's: a wider canvas would make the page scroll sideways.
  const width = Math.max(260, Math.min(1400, $('#screen-activity').clientWidth - 16));
  const uPlot = window.uPlot;
  if (!uPlot) return say('The chart library did not load.');
  const axis = timeAxis();
  charts.push(
    new uPlot(
      {
        width,
        height: 220,
        tzDate: axis.tzDate,
        scales: { x: { time: true } },
        series: [
          axis.x,
          { label: 'created', stroke: '#1f5fbf', width: 2, points: { show: false } },
          { label: 'succeeded', stroke: '#1b7f3b', width: 2, points: { show: false } },
          { label: 'failed', stroke: '#b3261e', width: 2, points: { show: false } },
          { label: 'cancelled', stroke: '#7a5c00', width: 2, dash: [4, 4], points: { show: false } },
        ],
        axes: [axis.axis, { label: 'jobs / min' }],
      },
      [xs, col('created'), col('succeeded'), col('failed'), col('cancelled')],
      $('#chart-jobs'),
    ),
    new uPlot(
      {
        width,
        height: 220,
        tzDate: axis.tzDate,
        scales: { x: { time: true } },
        series: [
          axis.x,
          { label: 'p50 ms', stroke: '#1f5fbf', width: 2, spanGaps: true },
          { label: 'p95 ms', stroke: '#b3261e', width: 2, spanGaps: true },
        ],
        axes: [axis.axis, { label: 'ms' }],
      },
      [xs, col('latencyP50Ms'), col('latencyP95Ms')],
      $('#chart-latency'),
    ),
  );
  const range = xs.length ? `, ${minuteOf(xs[0])} to ${minuteOf(xs.at(-1))} UTC` : '';
  for (const span of document.querySelectorAll('#screen-activity figcaption .range')) span.textContent = range;
  const sum = (name) => col(name).reduce((a, b) => a + b, 0);
  $('#activity-totals').textContent =
    `Last hour: ${sum('created')} created, ${sum('succeeded')} succeeded, ${sum('failed')} failed, ` +
    `${sum('cancelled')} cancelled; ${sum('attempts')} attempts answered.`;
}

// ---- batches ----

$('#batch-by-id').addEventListener('submit', (event) => {
  event.preventDefault();
  const id = new FormData(event.target).get('id').trim();
  if (id) location.hash = `batches/${encodeURIComponent(id)}`;
});

/** Items whose job is terminal, conflicts included (they have no job to wait for), of all the batch's items. */
const batchDone = (batch) => batch.itemCount - batch.liveJobs;

/** A batch in progress is read again every 3 s while its screen is shown. */
let batchRefresh;

async function loadBatches(id) {
  // The list needs jobs:read (the key's own owner); an operator key without it still opens any batch by id.
  const list = await api('/v1/batches?limit=20').catch((error) => error);
  const rows = $('#batches-table tbody');
  const empty = $('#batches-empty');
  if (list instanceof ApiError) {
    rows.replaceChildren();
    empty.textContent = list.status === 403 ? 'This key has no jobs:read: open a batch by its id.' : list.message;
    empty.hidden = false;
    $('#batches-table').hidden = true;
  } else {
    rows.replaceChildren(
      ...list.items.map((b) =>
        el(
          'tr',
          {},
          el('td', {}, el('a', { href: `#batches/${b.id}` }, el('code', { text: b.id.slice(0, 8) }))),
          el('td', { text: b.idempotencyKey }),
          el('td', { text: dateTime(b.createdAt) }),
          el('td', {}, el('progress', { max: b.itemCount, value: batchDone(b) }), ` ${batchDone(b)} / ${b.itemCount}`),
          el('td', { text: b.status }),
        ),
      ),
    );
    empty.textContent = "No batch yet for this key's owner.";
    empty.hidden = list.items.length > 0;
    $('#batches-table').hidden = list.items.length === 0;
  }
  const detail = $('#batch-detail');
  if (!id) {
    detail.hidden = true;
    return;
  }
  const [batch, jobs] = await Promise.all([
    api(`/v1/batches/${encodeURIComponent(id)}`),
    api(`/v1/batches/${encodeURIComponent(id)}/jobs?limit=100`),
  ]);
  $('#batch-detail-id').textContent = batch.id;
  $('#batch-progress').max = batch.itemCount;
  $('#batch-progress').value = batchDone(batch);
  $('#batch-progress-text').textContent = `${batchDone(batch)} of ${batch.itemCount} items done (${batch.status})`;
  const c = batch.counts;
  const summary = [
    ['Key', batch.idempotencyKey],
    ['Created', dateTime(batch.createdAt)],
    ['Completed', dateTime(batch.completedAt)],
    ['Live', `${c.pending} pending, ${c.running} running, ${c.unknown} unknown`],
    ['Terminal', `${c.succeeded} succeeded, ${c.failed} failed, ${c.cancelled} cancelled`],
    ['Conflicts', String(c.conflict)],
    ['Cost', batch.cost.map((x) => `${x.total} ${x.currency}`).join(', ') || '–'],
    ['Priority', String(batch.priority)],
  ];
  $('#batch-summary').replaceChildren(...summary.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })]));
  $('#batch-jobs tbody').replaceChildren(
    ...jobs.items.map((item) =>
      el(
        'tr',
        {},
        el('td', { text: String(item.index) }),
        el('td', { text: item.key }),
        el('td', { text: item.outcome }),
        el(
          'td',
          {},
          item.jobId ? el('a', { href: `#job/${item.jobId}` }, el('code', { text: item.jobId.slice(0, 8) })) : '–',
        ),
        el('td', { text: item.status ?? '–' }),
        el('td', { text: dateTime(item.completedAt) }),
      ),
    ),
  );
  detail.hidden = false;
  clearTimeout(batchRefresh);
  if (batch.status !== 'completed') {
    batchRefresh = setTimeout(() => {
      if (screenOf() === 'batches') loadBatches(id).catch(fail);
    }, 3000);
  }
}

// Sign-in first (the answer of a trip to the IdP is in the address), then the screen the address names.
void (async () => {
  await loadSignIn();
  await finishSignIn().catch(() => say('Sign-in failed: the identity provider could not be reached.'));
  showKeyStatus();
  await route();
})();
