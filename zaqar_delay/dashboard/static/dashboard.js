// zaqar-delay dashboard: a page over the public v2 API. Every request carries the headers
// any client sends; nothing is kept but the project or token in this tab's sessionStorage.
'use strict';

const SCAN_LIMIT = 1000; // messages read at most to draw a queue's schedule
const PAGE = 20;
const QUEUE_LIMIT = 1000; // queues listed at most
const CLAIM_SCAN = 200; // messages read at most, in posting order, to find claimed ones
const WINDOWS = { hour: 3600e3, day: 86400e3, week: 604800e3 };
const BINS = 24;

const session = {
  clientId: uuid(),
  project: new URLSearchParams(location.search).get('project')
    || sessionStorage.getItem('zd.project') || '',
  token: sessionStorage.getItem('zd.token') || '',
};
let refresh = null; // the live view's timer

function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

class ApiError extends Error {
  constructor(status, title, description) {
    super(`${title}: ${description}`);
    this.status = status; this.title = title; this.description = description;
  }
}

async function api(method, path, body) {
  const headers = { 'Client-ID': session.clientId, Accept: 'application/json' };
  if (session.token) headers['X-Auth-Token'] = session.token;
  if (session.project) headers['X-Project-ID'] = session.project;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let document = null;
  try { document = text ? JSON.parse(text) : null; } catch (e) { document = null; }
  if (!response.ok) {
    const title = (document && document.title) || `HTTP ${response.status}`;
    const description = (document && document.description) || text.slice(0, 200);
    throw new ApiError(response.status, title, description);
  }
  if (path === '/metrics') return text;
  return document;
}

// -- page furniture ---------------------------------------------------------------------

const $ = (selector) => document.querySelector(selector);

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === 'onclick') node.addEventListener('click', value);
    // Through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    else if (key === 'style') node.style.cssText = value;
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? '')));
  }
  return node;
}

function showError(error) {
  const box = $('#error');
  box.textContent = error instanceof ApiError ? `${error.title}: ${error.description}`
    : `Error: ${error.message || error}`;
  box.hidden = false;
}

function clearError() { $('#error').hidden = true; }

function show(...nodes) {
  const view = $('#view');
  view.replaceChildren(...nodes);
}

function table(headings, rows) {
  const head = element('tr', {}, headings.map(([label, cls]) => element('th', { class: cls }, label)));
  return element('table', {}, element('thead', {}, head), element('tbody', {}, rows));
}

function age(seconds) {
  if (seconds === undefined || seconds === null) return '—';
  if (seconds < 120) return `${seconds} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function when(iso) {
  if (!iso) return '—';
  const ms = Date.parse(iso) - Date.now();
  const text = new Date(iso).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  if (ms <= 0) return `${text} (due)`;
  return `${text} (in ${age(Math.ceil(ms / 1000))})`;
}

function preview(body) {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  return text.length > 80 ? `${text.slice(0, 77)}…` : text;
}

const q = encodeURIComponent;

// The items under `key` of a listing's pages from `path` on, following its "next" links,
// until `limit` items, a short page, or `enough(page)`.
async function listPages(path, key, limit, enough = () => false) {
  const found = [];
  while (path && found.length < limit) {
    const listed = await api('GET', path);
    const items = (listed && listed[key]) || [];
    if (!items.length) break;
    found.push(...items);
    if (enough(items)) break;
    const next = (listed.links || []).find((link) => link.rel === 'next');
    path = next && items.length === PAGE ? next.href : null;
  }
  return found;
}

// -- views ------------------------------------------------------------------------------

async function queuesView() {
  const names = await listPages(`/v2/queues?detailed=true&limit=${PAGE}`, 'queues', QUEUE_LIMIT);
  const rows = await Promise.all(names.map(async (queue) => {
    const { messages: s } = await api('GET', `/v2/queues/${q(queue.name)}/stats`);
    const dead = (queue.metadata || {})._dead_letter_queue;
    return element('tr', { 'data-queue': queue.name },
      element('td', {}, element('a', { href: `#/queue/${q(queue.name)}` }, queue.name)),
      element('td', { class: 'num' }, s.free), element('td', { class: 'num' }, s.claimed),
      element('td', { class: 'num' }, s.delayed ?? 0), element('td', {}, when(s.next_due)),
      element('td', {}, dead ? element('a', { href: `#/queue/${q(dead)}` }, dead) : '—'),
      element('td', { class: 'num' }, age(s.oldest && s.oldest.age)));
  }));
  show(element('h1', {}, `Queues of ${session.project || 'your project'}`),
    rows.length ? table([['queue'], ['free', 'num'], ['claimed', 'num'], ['delayed', 'num'],
      ['next due'], ['dead-letter queue'], ['oldest', 'num']], rows)
      : element('p', { class: 'muted' }, 'No queues.'),
    element('h2', {}, 'Topics'), ...await topicsTable());
}

// A topic's messages are pushed to each of its subscriptions when due, never claimed.
async function topicsTable() {
  const topics = await listPages(`/v2/topics?limit=${PAGE}`, 'topics', QUEUE_LIMIT);
  const rows = await Promise.all(topics.map(async (topic) => {
    const [{ messages: s }, subscribed] = await Promise.all([
      api('GET', `/v2/topics/${q(topic.name)}/stats`),
      listPages(`/v2/topics/${q(topic.name)}/subscriptions?limit=${PAGE}`, 'subscriptions', SCAN_LIMIT),
    ]);
    return element('tr', { 'data-topic': topic.name },
      element('td', {}, topic.name), element('td', { class: 'num' }, s.total),
      element('td', { class: 'num' }, s.delayed ?? 0), element('td', {}, when(s.next_due)),
      element('td', { class: 'num' }, subscribed.length));
  }));
  return [rows.length ? table([['topic'], ['messages', 'num'], ['delayed', 'num'], ['next due'],
    ['subscriptions', 'num']], rows) : element('p', { class: 'muted' }, 'No topics.')];
}

async function scheduled(name, horizonMs) {
  // Due order, delayed ones included, until past the horizon or SCAN_LIMIT messages.
  return listPages(
    `/v2/queues/${q(name)}/messages?include_delayed=true&sort=due&with_schedule=true&echo=true&limit=${PAGE}`,
    'messages', SCAN_LIMIT, (page) => Date.parse(page[page.length - 1].due) > horizonMs);
}

function histogram(messages, now, span) {
  const counts = new Array(BINS).fill(0);
  for (const message of messages) {
    const offset = Date.parse(message.due) - now;
    if (offset >= 0 && offset < span) counts[Math.floor((offset / span) * BINS)] += 1;
  }
  const top = Math.max(1, ...counts);
  const bars = counts.map((count, i) => element('div', {
    class: count ? 'bar' : 'bar empty', title: `${count} due in bin ${i + 1}`,
    'data-count': count, style: `height: ${(100 * count) / top}%`,
  }));
  return [element('div', { class: 'histogram', id: 'histogram' }, bars),
    element('div', { class: 'axis' }, element('span', {}, 'now'),
      element('span', {}, `+${age(Math.round(span / 2000))}`), element('span', {}, `+${age(span / 1000)}`))];
}

async function act(description, action) {
  if (!window.confirm(description)) return;
  try {
    clearError();
    await action();
    await render();
  } catch (error) { showError(error); }
}

function rescheduleButton(name, message) {
  return element('button', {
    class: 'reschedule',
    onclick: () => {
      const answer = window.prompt('New delay in seconds, or a time (2030-01-01T10:00:00Z):', '60');
      if (answer === null) return;
      const change = /^\d+$/.test(answer.trim()) ? { delay: Number(answer) } : { deliver_at: answer.trim() };
      act(`Reschedule ${message.id}?`, () => api('PATCH', `/v2/queues/${q(name)}/messages/${message.id}`, change));
    },
  }, 'Reschedule');
}

function editButton(name, message) {
  // The auditor's edit: the body replaced in place; id, due time and ttl stay.
  return element('button', {
    class: 'edit',
    onclick: () => {
      const answer = window.prompt('New body (JSON):', JSON.stringify(message.body));
      if (answer === null) return;
      let body;
      try { body = JSON.parse(answer); } catch (error) { showError(new Error(`Not JSON: ${error.message}`)); return; }
      act(`Edit the body of ${message.id}?`, () => api('PATCH', `/v2/queues/${q(name)}/messages/${message.id}`, { body }));
    },
  }, 'Edit');
}

function claimOf(message) {
  return new URL(message.href, location.origin).searchParams.get('claim_id');
}

async function claimedRows(name) {
  // Claimed messages among the first CLAIM_SCAN in posting order (a due-order listing holds
  // only unclaimed ones), each with its claim's age: one read per claim.
  const messages = await listPages(
    `/v2/queues/${q(name)}/messages?include_claimed=true&with_schedule=true&echo=true&limit=${PAGE}`,
    'messages', CLAIM_SCAN);
  const claimed = messages.filter(claimOf).slice(0, PAGE);
  const claims = new Map();
  await Promise.all([...new Set(claimed.map(claimOf))].map(async (id) => {
    try { claims.set(id, await api('GET', `/v2/queues/${q(name)}/claims/${id}`)); } catch (e) { claims.set(id, null); }
  }));
  return claimed.map((m) => {
    const claim = claims.get(claimOf(m));
    return element('tr', { 'data-claimed': m.id },
      element('td', {}, element('code', {}, m.id)), element('td', {}, element('code', {}, claimOf(m).slice(0, 8))),
      element('td', { class: 'num claim-age' }, claim ? age(claim.age) : 'ended'),
      element('td', { class: 'num claim-count' }, m.claim_count ?? '—'), element('td', {}, preview(m.body)));
  });
}

async function moveBack(dead, source, message) {
  // Post a copy to the source queue, then delete the dead-lettered one. The copy carries a
  // dedup_id made from the dead letter's id, so a move repeated after a failure between the
  // two requests stores it once (the idempotent-posting extension).
  await api('POST', `/v2/queues/${q(source)}/messages`, {
    messages: [{ body: message.body, ttl: message.ttl, dedup_id: `redrive-${dead}-${message.id}` }],
  });
  await api('DELETE', `/v2/queues/${q(dead)}/messages/${message.id}`);
}

async function deadLetterSection(dead, source) {
  if (!dead) return [];
  const listed = await api('GET', `/v2/queues/${q(dead)}/messages?include_delayed=true&echo=true&limit=${PAGE}`);
  const messages = (listed && listed.messages) || [];
  const rows = messages.map((m) => element('tr', { 'data-dead': m.id },
    element('td', {}, element('code', {}, m.id)), element('td', {}, age(m.age)), element('td', {}, preview(m.body)),
    element('td', { class: 'actions' }, element('button', {
      class: 'move-back',
      onclick: () => act(`Move ${m.id} back to ${source}?`, () => moveBack(dead, source, m)),
    }, `Move back to ${source}`))));
  const all = messages.length ? element('button', {
    class: 'move-all-back',
    onclick: () => act(`Move these ${messages.length} messages back to ${source}?`, async () => {
      for (const m of messages) await moveBack(dead, source, m);
    }),
  }, `Move these ${messages.length} back`) : '';
  const heading = element('h2', {}, 'Dead-letter queue ', element('a', { href: `#/queue/${q(dead)}` }, dead));
  if (!rows.length) return [heading, element('p', { class: 'muted' }, 'No dead-lettered messages.')];
  return [heading, table([['id'], ['age'], ['body'], ['']], rows), element('div', { class: 'toolbar' }, all)];
}

function lastDelivery(last) {
  if (!last) return '—';
  const ago = age(Math.max(0, Math.round((Date.now() - Date.parse(last.at)) / 1000)));
  return `${last.outcome}${last.detail ? ` (${last.detail})` : ''}, ${ago} ago`;
}

async function subscriptionSection(name) {
  const listed = await api('GET', `/v2/queues/${q(name)}/subscriptions?limit=${PAGE}`);
  const rows = ((listed && listed.subscriptions) || []).map((sub) => element('tr', { 'data-subscription': sub.id },
    element('td', {}, sub.subscriber), element('td', {}, sub.confirmed ? 'yes' : 'no'),
    element('td', { class: 'num' }, age(sub.age)), element('td', { class: 'num' }, age(sub.ttl)),
    element('td', { class: 'last-delivery' }, lastDelivery(sub.last_delivery))));
  return [element('h2', {}, 'Push subscriptions'),
    rows.length ? table([['subscriber'], ['confirmed'], ['age', 'num'], ['ttl', 'num'], ['last delivery']], rows)
      : element('p', { class: 'muted' }, 'No subscriptions.')];
}

// A schedule's last fire, or, while its fires fail, why and for how long.
function lastFire(s) {
  const failure = s.last_error;
  if (!failure) return s.last_fire ? when(s.last_fire.slot) : '—';
  const failing = age(Math.max(0, Math.round((Date.now() - Date.parse(failure.since)) / 1000)));
  return element('span', { class: 'failing', title: failure.title },
    `failing for ${failing}: ${failure.description}`);
}

// A queue's recurring schedules: the plan, the next fire times, pause or resume, run now.
async function scheduleSection(name) {
  const listed = await api('GET', `/v2/queues/${q(name)}/schedules?limit=${PAGE}`);
  const rows = ((listed && listed.schedules) || []).map((s) => element('tr', { 'data-schedule': s.name },
    element('td', {}, s.name),
    element('td', {}, s.cron ? `${s.cron} (${s.timezone})` : `every ${age(s.every)}`),
    element('td', { class: 'next' }, s.paused ? 'paused' : s.next.slice(0, 3).map(when).join(', ')),
    element('td', { class: 'last-fire' }, lastFire(s)),
    element('td', { class: 'num' }, s.fires),
    element('td', { class: 'actions' },
      element('button', {
        class: 'pause',
        onclick: () => act(`${s.paused ? 'Resume' : 'Pause'} schedule ${s.name}?`,
          () => api('PATCH', `/v2/queues/${q(name)}/schedules/${q(s.name)}`, { paused: !s.paused })),
      }, s.paused ? 'Resume' : 'Pause'),
      element('button', {
        class: 'run',
        onclick: () => act(`Fire schedule ${s.name} once now?`,
          () => api('POST', `/v2/queues/${q(name)}/schedules/${q(s.name)}/run`)),
      }, 'Run now'))));
  return [element('h2', {}, 'Recurring schedules'),
    rows.length ? table([['schedule'], ['plan'], ['next fires'], ['last fire'], ['fires', 'num'], ['']], rows)
      : element('p', { class: 'muted' }, 'No schedules.')];
}

async function queueView(name, windowName) {
  const span = WINDOWS[windowName] || WINDOWS.day;
  const now = Date.now();
  const [{ messages: s }, messages, queue] = await Promise.all([
    api('GET', `/v2/queues/${q(name)}/stats`),
    scheduled(name, now + span),
    api('GET', `/v2/queues/${q(name)}`).catch(() => ({})),
  ]);
  const upcoming = messages.filter((m) => Date.parse(m.due) > now).slice(0, PAGE);
  const [claimRows, dead, subscriptions, schedules] = await Promise.all([
    claimedRows(name), deadLetterSection((queue || {})._dead_letter_queue, name),
    subscriptionSection(name), scheduleSection(name),
  ]);
  const cards = element('div', { class: 'cards' },
    [['free', s.free], ['claimed', s.claimed], ['delayed', s.delayed ?? 0], ['total', s.total],
      ['next due', when(s.next_due)], ['oldest', age(s.oldest && s.oldest.age)]]
      .map(([label, value]) => element('div', { class: 'card', 'data-stat': label }, element('b', {}, value), label)));
  const windows = element('div', { class: 'toolbar' }, 'Scheduled over the next',
    Object.keys(WINDOWS).map((w) => element('a', { href: `#/queue/${q(name)}/${w}`, class: w === windowName ? 'current' : '' }, w)));
  const rows = upcoming.map((m) => element('tr', { 'data-message': m.id },
    element('td', {}, element('code', {}, m.id)), element('td', {}, when(m.due)),
    element('td', {}, preview(m.body)),
    element('td', { class: 'actions' }, editButton(name, m), rescheduleButton(name, m),
      element('button', {
        class: 'danger cancel',
        onclick: () => act(`Cancel message ${m.id}? It will be deleted.`,
          () => api('DELETE', `/v2/queues/${q(name)}/messages/${m.id}`)),
      }, 'Cancel'))));
  show(element('h1', {}, `Queue ${name}`), cards,
    element('h2', {}, 'Due times'), windows, ...histogram(messages, now, span),
    messages.length >= SCAN_LIMIT ? element('p', { class: 'muted' }, `The first ${SCAN_LIMIT} messages in due order are drawn.`) : '',
    element('h2', {}, 'Next scheduled'),
    rows.length ? table([['id'], ['due'], ['body'], ['']], rows) : element('p', { class: 'muted' }, 'Nothing scheduled.'),
    element('h2', {}, 'Claimed'),
    claimRows.length ? table([['id'], ['claim'], ['claim age', 'num'], ['claims', 'num'], ['body']], claimRows)
      : element('p', { class: 'muted' }, 'Nothing claimed.'),
    ...dead,
    ...subscriptions,
    ...schedules,
    element('h2', {}, 'Queue'),
    element('button', {
      class: 'danger purge',
      onclick: () => act(`Purge every message of ${name}?`,
        () => api('POST', `/v2/queues/${q(name)}/purge`, { resource_types: ['messages'] })),
    }, 'Purge messages'));
}

function parseHistogram(text, metric) {
  // Sum a Prometheus histogram's buckets over every label set: le -> cumulative count.
  const buckets = new Map();
  const pattern = new RegExp(`^${metric}_bucket\\{([^}]*)\\} ([0-9.eE+-]+)$`);
  for (const line of text.split('\n')) {
    const match = pattern.exec(line);
    if (!match) continue;
    const le = /le="([^"]+)"/.exec(match[1]);
    if (!le) continue;
    buckets.set(le[1], (buckets.get(le[1]) || 0) + Number(match[2]));
  }
  const ordered = [...buckets.entries()].sort((a, b) => Number(a[0]) - Number(b[0]));
  return ordered.map(([le, cumulative], i) => [le, cumulative - (i ? ordered[i - 1][1] : 0)]);
}

function metricBars(id, title, buckets) {
  const top = Math.max(1, ...buckets.map(([, n]) => n));
  return [element('h2', {}, title),
    element('div', { class: 'histogram', id }, buckets.map(([le, n]) => element('div', {
      class: n ? 'bar' : 'bar empty', title: `≤ ${le} s: ${n}`, 'data-le': le, 'data-count': n,
      style: `height: ${(100 * n) / top}%`,
    }))),
    element('div', { class: 'axis' }, buckets.length ? [element('span', {}, `≤ ${buckets[0][0]} s`),
      element('span', {}, `≤ ${buckets[buckets.length - 1][0]} s`)] : [])];
}

async function serviceView() {
  const text = await api('GET', '/metrics');
  show(element('h1', {}, 'Service'),
    element('p', { class: 'muted', id: 'updated' }, `Updated ${new Date().toISOString()}; refreshes every 5 s.`),
    ...metricBars('claim-lateness', 'Claim lateness', parseHistogram(text, 'zaqar_delay_claim_lateness_seconds')),
    ...metricBars('request-latency', 'Request latency', parseHistogram(text, 'zaqar_delay_request_duration_seconds')));
  refresh = setTimeout(() => render().catch(showError), 5000);
}

// -- pooling (admin) ---------------------------------------------------------------------

function storeType(uri) {
  // The scheme only: a pool's URI may carry a password.
  return String(uri || '').split(':')[0] || '—';
}

async function poolsView() {
  const project = session.project;
  const [pools, flavors, placed] = await Promise.all([
    listPages(`/v2/pools?detailed=true&limit=${PAGE}`, 'pools', QUEUE_LIMIT),
    listPages(`/v2/flavors?detailed=true&limit=${PAGE}`, 'flavors', QUEUE_LIMIT),
    api('GET', `/v2/placements?limit=${PAGE}${project ? `&project=${q(project)}` : ''}`),
  ]);
  const perPool = placed.queues_per_pool || {};
  const next = (placed.links || []).find((link) => link.rel === 'next');
  const more = next && placed.placements.length === PAGE
    ? await listPages(next.href, 'placements', QUEUE_LIMIT) : [];
  const placements = [...placed.placements, ...more];
  const poolRows = pools.map((pool) => element('tr', { 'data-pool': pool.name },
    element('td', {}, pool.name), element('td', {}, storeType(pool.uri)),
    element('td', { class: 'num' }, pool.weight), element('td', {}, pool.flavor || '—'),
    element('td', { class: 'num pool-queues' }, perPool[pool.name] ?? 0)));
  const flavorRows = flavors.map((flavor) => element('tr', { 'data-flavor': flavor.name },
    element('td', {}, flavor.name), element('td', {}, (flavor.pool_list || []).join(', ')),
    element('td', {}, (flavor.capabilities || []).join(', '))));
  const placementRows = placements.map((p) => element('tr', { 'data-placement': p.queue },
    element('td', {}, element('a', { href: `#/queue/${q(p.queue)}` }, p.queue)),
    element('td', { class: 'placed-on' }, p.pool)));
  show(element('h1', {}, 'Pools'),
    poolRows.length ? table([['pool'], ['store'], ['weight', 'num'], ['flavor'], ['queues', 'num']], poolRows)
      : element('p', { class: 'muted' }, perPool.default
        ? `No pool registered: ${perPool.default} queues on the default store.` : 'No pool registered.'),
    element('h2', {}, 'Flavors'),
    flavorRows.length ? table([['flavor'], ['pools'], ['capabilities']], flavorRows)
      : element('p', { class: 'muted' }, 'No flavors.'),
    element('h2', {}, `Where the queues of ${placed.project} live`),
    placementRows.length ? table([['queue'], ['pool']], placementRows)
      : element('p', { class: 'muted' }, 'No queues.'));
}

async function offerPools() {
  // The link shows only where the admin API answers this caller (pooling, admin role).
  try {
    await api('GET', '/v2/pools?limit=1');
    $('#pools-link').hidden = false;
  } catch (error) { $('#pools-link').hidden = true; }
}

async function render() {
  if (refresh) { clearTimeout(refresh); refresh = null; }
  const [, kind, name, windowName] = location.hash.split('/');
  if (kind === 'service') return serviceView();
  if (kind === 'pools') return poolsView();
  if (kind === 'queue' && name) return queueView(decodeURIComponent(name), windowName || 'day');
  return queuesView();
}

function start() {
  $('#project').value = session.project;
  $('#token').value = session.token;
  $('#identity').addEventListener('submit', (event) => {
    event.preventDefault();
    session.project = $('#project').value.trim();
    session.token = $('#token').value.trim();
    sessionStorage.setItem('zd.project', session.project);
    sessionStorage.setItem('zd.token', session.token);
    clearError();
    offerPools();
    render().catch(failed);
  });
  window.addEventListener('hashchange', () => { clearError(); render().catch(failed); });
  offerPools();
  render().catch(failed);
}

function failed(error) {
  if (error instanceof ApiError && error.status === 401) {
    // Keystone mode without a (valid) token: ask for one, show nothing else.
    $('#token-field').hidden = false;
    show(element('p', { id: 'need-token' }, 'This server needs a Keystone token: enter one above.'));
  } else {
    show(element('p', { class: 'muted' }, 'Nothing to show.'));
  }
  showError(error);
}

document.addEventListener('DOMContentLoaded', start);
