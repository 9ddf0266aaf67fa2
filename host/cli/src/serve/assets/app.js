// The m3 inbox: pages rendered from m3 serve's JSON API and kept current by its event stream.
// Served by the m3 binary itself; no framework, nothing fetched from elsewhere. Elements are
// built with textContent only: text from servers and schemas is never parsed as HTML.
'use strict';

const STEPS = [
  ['pending', 'Asked'],
  ['response_validated', 'Validated'],
  ['delivery_started', 'Delivering'],
  ['delivered', 'Delivered'],
  ['resolved', 'Resolved'],
];

let csrf = (document.querySelector('meta[name="m3-csrf"]') || {}).content || '';
const app = document.getElementById('app');
let view = null; // { refresh(), onChange(kind, data) }

// ---- elements -------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'text') node.textContent = value;
    else if (name === 'class') node.className = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else if (name in node && typeof value !== 'string') node[name] = value;
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function link(href, text) {
  return el('a', { href, text });
}

function shortId(id) {
  return id && id.length > 12 ? id.slice(0, 12) + '…' : id || '';
}

function when(text) {
  if (!text) return el('span', { class: 'muted', text: '—' });
  const at = new Date(text);
  const seconds = Math.round((Date.now() - at.getTime()) / 1000);
  const ago = Math.abs(seconds);
  const amount = ago < 60 ? `${ago} s` : ago < 3600 ? `${Math.floor(ago / 60)} min`
    : ago < 86400 ? `${Math.floor(ago / 3600)} h` : `${Math.floor(ago / 86400)} d`;
  const words = seconds >= 0 ? `${amount} ago` : `in ${amount}`;
  return el('time', { datetime: text, title: at.toLocaleString(), text: words });
}

function badge(status) {
  return el('span', { class: `badge ${status || ''}`, text: (status || '').replace(/_/g, ' ') });
}

// ---- the API --------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, error) {
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.type = error.type || 'EngineError';
    this.code = error.code || null;
    this.requestKey = error.request_key || null;
    this.field = error.field || null;
  }
}

async function refreshCsrf() {
  const response = await fetch('/api/session', { credentials: 'same-origin' });
  if (response.ok) csrf = (await response.json()).csrf;
}

async function api(method, path, body) {
  const send = () => {
    const headers = { Accept: 'application/json' };
    if (method !== 'GET') headers['X-M3-CSRF'] = csrf;
    const init = { method, headers, credentials: 'same-origin' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return fetch(path, init);
  };
  let response = await send();
  if (response.status === 403 && method !== 'GET') {
    // Without a token the CSRF value is new after a restart of the server: fetch it once.
    const refused = await response.clone().json().catch(() => null);
    if (refused && refused.error && refused.error.code === 'csrf_refused') {
      await refreshCsrf();
      response = await send();
    }
  }
  if (response.status === 401) {
    location.href = '/login?next=' + encodeURIComponent(location.pathname);
  }
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, (data && data.error) || {});
  }
  return data;
}

function randomKey() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return 'web-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

// ---- live changes ---------------------------------------------------------------------

function connect() {
  const live = document.getElementById('live');
  const stream = new EventSource('/api/events/stream');
  const kinds = ['round_created', 'round_answered', 'round_resolved', 'round_failed',
    'execution_finished'];
  stream.onopen = () => {
    live.textContent = 'live';
    live.className = 'live on';
    if (view) view.refresh(); // changes missed while the stream was away
  };
  stream.onerror = () => {
    live.textContent = 'reconnecting…';
    live.className = 'live off';
  };
  for (const kind of kinds) {
    stream.addEventListener(kind, (event) => {
      let data = {};
      try { data = JSON.parse(event.data); } catch (_) { /* keep {} */ }
      if (view) view.onChange(kind, data);
    });
  }
  stream.addEventListener('lagged', () => view && view.refresh());
}

// `fn` run one at a time: a call while one runs runs once more after it (two overlapping
// refreshes would each rebuild the page, the second throwing away what was typed into the first).
function serial(fn) {
  let running = null;
  let again = false;
  return async function run() {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      do {
        again = false;
        await fn();
      } while (again);
    })();
    try {
      await running;
    } finally {
      running = null;
    }
  };
}

function debounced(fn) {
  let timer = null;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(fn, 50);
  };
}

function failure(error) {
  return el('p', { class: 'notice error', role: 'alert', 'data-kind': error.code || 'error' },
    el('strong', { text: error.type + ': ' }), error.message);
}

// ---- the inbox ------------------------------------------------------------------------

function inboxView() {
  const rounds = el('section', { id: 'inbox' });
  const runs = el('section', { id: 'executions' });
  app.replaceChildren(el('h1', { text: 'Waiting for an answer' }), rounds,
    el('h2', { text: 'Executions' }), runs);
  document.title = 'm3 inbox';

  const refresh = serial(async () => {
    try {
      const [pending, executions] = await Promise.all([
        api('GET', '/api/rounds/pending'), api('GET', '/api/executions')]);
      pending.sort((a, b) => b.created_at.localeCompare(a.created_at));
      rounds.replaceChildren(pending.length === 0
        ? el('p', { class: 'empty', text: 'Nothing waits for an answer.' })
        : el('table', { class: 'list' },
          el('thead', {}, el('tr', {}, ['Asked', 'Server', 'Operation', 'Question', 'Execution',
            'Deadline'].map((h) => el('th', { text: h })))),
          el('tbody', {}, pending.map(roundRow))));
      document.title = pending.length ? `(${pending.length}) m3 inbox` : 'm3 inbox';
      executions.sort((a, b) => b.created_at.localeCompare(a.created_at));
      runs.replaceChildren(executions.length === 0
        ? el('p', { class: 'empty', text: 'No executions yet.' })
        : el('table', { class: 'list' },
          el('thead', {}, el('tr', {}, ['Execution', 'Lifecycle', 'Outcome', 'Started']
            .map((h) => el('th', { text: h })))),
          el('tbody', {}, executions.slice(0, 50).map((e) => el('tr',
            { 'data-execution-id': e.execution_id },
            el('td', {}, link(`/executions/${e.execution_id}`, shortId(e.execution_id))),
            el('td', {}, badge(e.lifecycle)),
            el('td', {}, e.outcome ? badge(e.outcome) : ''),
            el('td', {}, when(e.created_at)))))));
    } catch (error) {
      rounds.replaceChildren(failure(error));
    }
  });

  function roundRow(round) {
    const first = Object.values(round.requests)[0] || {};
    const href = `/rounds/${round.round_id}`;
    return el('tr', { class: 'round', 'data-round-id': round.round_id },
      el('td', {}, when(round.created_at)),
      el('td', { text: round.server }),
      el('td', { text: `${round.operation_kind} ${round.operation_name}` }),
      el('td', {}, link(href, first.message || '(no message)')),
      el('td', {}, link(`/executions/${round.execution_id}`, shortId(round.execution_id))),
      el('td', {}, round.deadline ? when(round.deadline) : el('span', { class: 'muted', text: 'none' })));
  }

  const later = debounced(refresh);
  refresh();
  return { refresh, onChange: later };
}

// ---- one round ------------------------------------------------------------------------

function roundView(roundId) {
  const head = el('div');
  const progress = el('ol', { id: 'progress', class: 'progress' });
  const notice = el('div', { id: 'notice' });
  const body = el('div', { id: 'round' });
  app.replaceChildren(head, progress, notice, body);
  let shown = null; // the status the page shows
  let submitted = false; // this page sent the answer that was taken

  function showProgress(record) {
    const failed = record.status === 'failed';
    const at = STEPS.findIndex(([status]) => status === record.status);
    progress.setAttribute('data-status', record.status);
    progress.replaceChildren(...STEPS.map(([status, words], index) => el('li', {
      class: failed ? 'step' : index < at ? 'step done' : index === at ? 'step current' : 'step',
      'data-step': status,
      text: words,
    })));
    if (failed) {
      progress.append(el('li', { class: 'step failed', 'data-step': 'failed',
        text: `Failed (${record.failure_code || 'unknown'})` }));
    }
  }

  const refresh = serial(async () => {
    let record;
    try {
      record = await api('GET', `/api/rounds/${encodeURIComponent(roundId)}`);
    } catch (error) {
      notice.replaceChildren(failure(error));
      return;
    }
    roundId = record.round_id;
    document.title = `${record.operation_name} · m3 inbox`;
    head.replaceChildren(
      el('p', { class: 'crumbs' }, link('/', 'Inbox'), ' › ',
        link(`/executions/${record.execution_id}`, `execution ${shortId(record.execution_id)}`)),
      el('h1', { text: `${record.server}: ${record.operation_kind} ${record.operation_name}` }),
      el('p', { class: 'muted' }, 'Asked ', when(record.created_at),
        record.deadline ? [' · deadline ', when(record.deadline)] : ''));
    showProgress(record);
    if (record.status === 'failed') {
      notice.replaceChildren(el('p', { class: 'notice error', role: 'alert', 'data-kind': 'failed' },
        el('strong', { text: `This round failed (${record.failure_code || 'unknown'}): ` }),
        record.failure_message || ''));
    }
    if (record.status === 'pending') {
      if (shown !== 'pending') body.replaceChildren(answerForm(record));
    } else {
      if (shown === 'pending' && !submitted) {
        notice.replaceChildren(el('p', { class: 'notice conflict', role: 'alert',
          'data-kind': 'answered_elsewhere', text:
          'Someone else answered this round first; your answers were not sent.' }));
      }
      body.replaceChildren(answered(record));
    }
    shown = record.status;
  });

  // What became of the stored answers, from the round's own timestamps: never more than they
  // record (a failed round's answers may have reached the server before it failed).
  function delivery(record) {
    if (record.delivered_at) {
      return el('p', { class: 'muted', 'data-delivery': 'delivered' },
        'Answers are not shown here. The server received them ', when(record.delivered_at),
        record.status === 'failed' ? '; the round failed after that.' : '.');
    }
    if (record.status === 'failed') {
      return record.delivery_started_at
        ? el('p', { class: 'muted', 'data-delivery': 'unconfirmed' },
          'Answers are not shown here. Their delivery started ', when(record.delivery_started_at),
          ' and was never confirmed before the round failed: the server may have received them.')
        : el('p', { class: 'muted', 'data-delivery': 'never', text:
          'Answers are not shown here. They were never delivered: the round failed first.' });
    }
    return el('p', { class: 'muted', 'data-delivery': 'waiting', text: record.delivery_started_at
      ? 'Answers are not shown here. They are being delivered to the server.'
      : 'Answers are not shown here. They wait for the worker, which delivers them once.' });
  }

  function answered(record) {
    const rows = Object.entries(record.responses || {}).map(([key, r]) => el('tr', {},
      el('td', { text: key }), el('td', {}, badge(r.action)),
      el('td', { text: r.content_fields === null || r.content_fields === undefined ? ''
        : `${r.content_fields} field(s), ${r.content_bytes} bytes` })));
    return el('section', { class: 'card' },
      el('h2', { text: 'Answer' }),
      rows.length ? el('table', { class: 'list' }, el('tbody', {}, rows))
        : el('p', { class: 'muted', text: 'No answer was stored.' }),
      rows.length ? delivery(record) : '');
  }

  function answerForm(record) {
    const requests = Object.entries(record.requests);
    const parts = requests.map(([key, request], index) => requestPart(key, request, index));
    const form = el('form', { id: 'answer', novalidate: true });
    const sending = el('span', { class: 'muted', id: 'sending' });
    let key = randomKey();
    const submit = async (all) => {
      notice.replaceChildren();
      const responses = {};
      let ok = true;
      for (const part of parts) {
        const action = all || part.action();
        const answer = part.answer(action);
        if (answer === null) ok = false;
        else responses[part.key] = answer;
      }
      if (!ok) {
        notice.replaceChildren(el('p', { class: 'notice error', role: 'alert', 'data-kind': 'invalid',
          text: 'Some values need fixing (see the fields).' }));
        return;
      }
      for (const button of form.querySelectorAll('button')) button.disabled = true;
      sending.textContent = 'Sending…';
      try {
        const taken = await api('POST', `/api/rounds/${encodeURIComponent(record.round_id)}/responses`,
          { responses, idempotency_key: key });
        submitted = true;
        notice.replaceChildren(el('p', { class: 'notice ok', role: 'status', 'data-kind': 'accepted',
          text: 'Answer taken. The worker delivers it to the server once; progress shows above.' }));
        showProgress(taken);
        body.replaceChildren(answered(taken));
        shown = taken.status;
      } catch (error) {
        for (const button of form.querySelectorAll('button')) button.disabled = false;
        sending.textContent = '';
        if (error instanceof ApiError && error.status === 400) key = randomKey();
        const part = parts.find((p) => p.key === error.requestKey);
        if (part && error.field && part.showError(error.field, `${error.message}`)) {
          notice.replaceChildren(el('p', { class: 'notice error', role: 'alert',
            'data-kind': error.code || 'invalid', text: 'The server refused a value (see the field).' }));
        } else if (error instanceof ApiError && (error.status === 409 || error.status === 410)) {
          // Someone else's answer came first, or the round ended. A repeat of this page's own
          // answer to a round that failed after taking it says what became of that answer.
          const heading = {
            delivered_then_failed: 'Delivered, then the round failed: ',
            delivery_unconfirmed: 'Delivery unconfirmed, and the round failed: ',
          }[error.code] || 'Not taken: ';
          notice.replaceChildren(el('p', { class: 'notice conflict', role: 'alert',
            'data-kind': error.code || 'conflict' }, el('strong', { text: heading }),
          error.message));
          submitted = true; // keep this notice when the page refreshes
          refresh();
        } else {
          notice.replaceChildren(failure(error));
        }
      }
    };
    form.addEventListener('submit', (event) => { event.preventDefault(); submit(null); });
    form.append(...parts.map((p) => p.node),
      el('div', { class: 'actions' },
        el('button', { type: 'submit', id: 'submit', class: 'primary', text: 'Submit' }),
        el('button', { type: 'button', id: 'decline', text: 'Decline',
          title: 'Answer every request with decline', onclick: () => submit('decline') }),
        el('button', { type: 'button', id: 'cancel-request', text: 'Cancel',
          title: 'Answer every request with cancel', onclick: () => submit('cancel') }),
        sending));
    return form;
  }

  const later = debounced(refresh);
  refresh();
  return {
    refresh,
    onChange: (kind, data) => { if (data.round_id === roundId) later(); },
  };
}

// One request of a round: its message and its fields (form mode) or its URL and a consent
// box (URL mode), with an action choice.
function requestPart(key, request, index) {
  const fields = [];
  const node = el('fieldset', { class: 'request card', 'data-request-key': key });
  node.append(el('legend', { text: request.message || key }));
  const actionName = `action-${index}`;
  const actions = ['accept', 'decline', 'cancel'].map((action) => el('label', { class: 'choice' },
    el('input', { type: 'radio', name: actionName, value: action, checked: action === 'accept',
      'data-action': action }), ` ${action}`));
  node.append(el('div', { class: 'action-choice', role: 'radiogroup' }, actions));
  let consent = null;
  if (request.mode === 'url') {
    consent = el('input', { type: 'checkbox', id: `consent-${index}`, class: 'consent' });
    node.append(el('p', {}, 'The server asks you to open this address yourself:'),
      el('code', { class: 'url', 'data-url': true, text: request.url || '' }),
      el('p', { class: 'muted', text: 'The inbox never opens it. Accept only after you have done what it asks.' }),
      el('label', { class: 'choice' }, consent, ' I have opened it myself and consent'),
      el('p', { class: 'error', 'data-error-for': '', role: 'alert' }));
  } else {
    const schema = request.requested_schema || {};
    const required = new Set(schema.required || []);
    for (const [name, property] of Object.entries(schema.properties || {})) {
      const field = makeField(`f${index}`, name, property || {}, required.has(name));
      fields.push(field);
      node.append(field.node);
    }
  }
  const action = () => node.querySelector(`input[name="${actionName}"]:checked`).value;
  return {
    key,
    node,
    action,
    // The response for `action`, or null (with the errors shown) when a value is wrong.
    answer(chosen) {
      if (chosen !== 'accept') return { action: chosen };
      if (request.mode === 'url') {
        const error = node.querySelector('[data-error-for=""]');
        if (!consent.checked) {
          error.textContent = 'Tick the consent box to accept, or decline.';
          return null;
        }
        error.textContent = '';
        return { action: 'accept' };
      }
      const content = {};
      let ok = true;
      for (const field of fields) {
        const problem = field.check();
        if (problem) { ok = false; continue; }
        const value = field.value();
        if (value !== undefined) content[field.name] = value;
      }
      return ok ? { action: 'accept', content } : null;
    },
    showError(name, message) {
      const field = fields.find((f) => f.name === name);
      if (!field) return false;
      field.show(message);
      return true;
    },
  };
}

// ---- form fields ----------------------------------------------------------------------

function options(property) {
  // [{value, title}] of a single-select enum (`enum` with `enumNames`, or `oneOf`/`anyOf` of
  // `const` with `title`), or null.
  if (Array.isArray(property.enum)) {
    return property.enum.map((value, i) => ({
      value, title: (property.enumNames && property.enumNames[i]) || String(value) }));
  }
  const choices = property.oneOf || property.anyOf;
  if (Array.isArray(choices) && choices.every((c) => c && 'const' in c)) {
    return choices.map((c) => ({ value: c.const, title: c.title || String(c.const) }));
  }
  return null;
}

function kindOf(property) {
  if (property.type === 'array') return 'multi';
  if (options(property)) return 'select';
  if (property.type === 'boolean') return 'boolean';
  if (property.type === 'number' || property.type === 'integer') return 'number';
  return 'string';
}

function makeField(prefix, name, property, required) {
  const id = `${prefix}-${name.replace(/[^A-Za-z0-9_-]/g, '_')}`;
  const kind = kindOf(property);
  const error = el('p', { class: 'error', 'data-error-for': name, role: 'alert' });
  const title = property.title || name;
  const label = el('label', { for: id }, title, required ? el('span', { class: 'required',
    title: 'required', text: ' *' }) : '');
  const hint = property.description ? el('p', { class: 'hint', text: property.description }) : null;
  let input;
  let choices = [];
  if (kind === 'select') {
    choices = options(property);
    input = el('select', { id, name },
      el('option', { value: '', text: required ? '— choose —' : '— none —' }),
      choices.map((c, i) => el('option', { value: String(i), text: c.title })));
    const at = choices.findIndex((c) => c.value === property.default);
    if (at >= 0) input.value = String(at);
  } else if (kind === 'multi') {
    choices = options(property.items || {}) || [];
    const chosen = new Set(Array.isArray(property.default) ? property.default : []);
    input = el('div', { id, class: 'multi', role: 'group' }, choices.map((c, i) => el('label',
      { class: 'choice' }, el('input', { type: 'checkbox', name, value: String(i),
        checked: chosen.has(c.value) }), ` ${c.title}`)));
  } else if (kind === 'boolean') {
    input = el('input', { id, name, type: 'checkbox', checked: property.default === true });
  } else if (kind === 'number') {
    input = el('input', { id, name, type: 'number', inputmode: 'decimal',
      step: property.type === 'integer' ? '1' : 'any', min: property.minimum, max: property.maximum });
    if (typeof property.default === 'number') input.value = String(property.default);
  } else {
    const type = { email: 'email', uri: 'url', date: 'date', 'date-time': 'datetime-local' }[
      property.format] || 'text';
    input = el('input', { id, name, type, minlength: property.minLength,
      maxlength: property.maxLength, autocomplete: 'off' });
    if (typeof property.default === 'string') {
      input.value = type === 'datetime-local' ? property.default.slice(0, 16) : property.default;
    }
  }
  const node = el('div', { class: `field ${kind}`, 'data-field': name, 'data-kind': kind },
    kind === 'boolean' ? el('label', { class: 'choice', for: id }, input, ' ', title,
      required ? el('span', { class: 'required', text: ' *' }) : '') : [label, input],
    hint, error);

  function raw() {
    if (kind === 'multi') {
      return Array.from(input.querySelectorAll('input:checked'), (box) => choices[Number(box.value)].value);
    }
    if (kind === 'boolean') return input.checked;
    return input.value;
  }

  function value() {
    const text = raw();
    if (kind === 'multi' || kind === 'boolean') return text;
    if (text === '') return undefined;
    if (kind === 'select') return choices[Number(text)].value;
    if (kind === 'number') return Number(text);
    if (input.type === 'datetime-local') return new Date(text).toISOString();
    return text;
  }

  function check() {
    const problem = judge();
    show(problem);
    return problem;
  }

  function judge() {
    const text = raw();
    if (kind === 'boolean') return '';
    if (kind === 'multi') {
      if (property.minItems !== undefined && text.length < property.minItems) {
        return `Choose at least ${property.minItems}.`;
      }
      if (property.maxItems !== undefined && text.length > property.maxItems) {
        return `Choose at most ${property.maxItems}.`;
      }
      return '';
    }
    if (text === '' || (kind === 'number' && input.validity.badInput)) {
      if (kind === 'number' && input.validity.badInput) return 'Not a number.';
      return required ? 'Required.' : '';
    }
    if (kind === 'number') {
      const n = Number(text);
      if (!Number.isFinite(n)) return 'Not a number.';
      if (property.type === 'integer' && !Number.isInteger(n)) return 'A whole number, please.';
      if (property.minimum !== undefined && n < property.minimum) return `At least ${property.minimum}.`;
      if (property.maximum !== undefined && n > property.maximum) return `At most ${property.maximum}.`;
      return '';
    }
    if (kind === 'string') {
      const length = Array.from(text).length;
      if (property.minLength !== undefined && length < property.minLength) {
        return `At least ${property.minLength} characters.`;
      }
      if (property.maxLength !== undefined && length > property.maxLength) {
        return `At most ${property.maxLength} characters.`;
      }
      if (property.format === 'email' && !/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(text)) {
        return 'Not an email address.';
      }
      if (property.format === 'uri') {
        try { new URL(text); } catch (_) { return 'Not an absolute URI.'; }
      }
      if (property.format === 'date' && !/^\d{4}-\d{2}-\d{2}$/.test(text)) return 'Not a date.';
      if (property.format === 'date-time' && Number.isNaN(new Date(text).getTime())) {
        return 'Not a date and time.';
      }
    }
    return '';
  }

  function show(message) {
    error.textContent = message || '';
    node.classList.toggle('invalid', Boolean(message));
  }

  input.addEventListener('input', check);
  input.addEventListener('change', check);
  return { name, node, value, check, show };
}

// ---- one execution --------------------------------------------------------------------

function executionView(executionId) {
  const head = el('div');
  const notice = el('div', { id: 'notice' });
  const rounds = el('section', { id: 'rounds' });
  const history = el('section', { id: 'history' });
  app.replaceChildren(head, notice, el('h2', { text: 'Rounds' }), rounds,
    el('h2', { text: 'What happened' }), history);

  const refresh = serial(async () => {
    let status;
    let events;
    try {
      [status, events] = await Promise.all([
        api('GET', `/api/executions/${encodeURIComponent(executionId)}`),
        api('GET', `/api/executions/${encodeURIComponent(executionId)}/events`)]);
    } catch (error) {
      notice.replaceChildren(failure(error));
      return;
    }
    executionId = status.execution_id;
    document.title = `execution ${shortId(executionId)} · m3 inbox`;
    const running = status.lifecycle !== 'finished';
    head.replaceChildren(
      el('p', { class: 'crumbs' }, link('/', 'Inbox')),
      el('h1', { text: `Execution ${executionId}` }),
      el('dl', { class: 'facts', id: 'facts' },
        el('dt', { text: 'Lifecycle' }), el('dd', { 'data-lifecycle': status.lifecycle }, badge(status.lifecycle)),
        el('dt', { text: 'Outcome' }), el('dd', { id: 'outcome', 'data-outcome': status.outcome || '' },
          status.outcome ? badge(status.outcome) : '—'),
        status.failure_kind ? [el('dt', { text: 'Failure' }), el('dd', {
          text: `${status.failure_kind}${status.failure_code ? ` (${status.failure_code})` : ''}: ${status.failure_message || ''}` })] : '',
        el('dt', { text: 'Started' }), el('dd', {}, when(status.created_at)),
        status.final_message ? [el('dt', { text: 'Final message' }), el('dd', { text: status.final_message })] : ''),
      running ? el('button', { id: 'cancel-execution', type: 'button', text: status.cancel_requested
        ? 'Cancel requested' : 'Cancel execution', disabled: status.cancel_requested, onclick: cancel }) : '');
    rounds.replaceChildren(status.rounds.length === 0
      ? el('p', { class: 'empty', text: 'No rounds yet.' })
      : el('table', { class: 'list' },
        el('thead', {}, el('tr', {}, ['Round', 'Status', 'Operation', 'Asked']
          .map((h) => el('th', { text: h })))),
        el('tbody', {}, status.rounds.map((r) => el('tr', { 'data-round-id': r.round_id },
          el('td', {}, link(`/rounds/${r.round_id}`, shortId(r.round_id))),
          el('td', {}, badge(r.status)),
          el('td', { text: `${r.operation_kind} ${r.operation_name}` }),
          el('td', {}, when(r.created_at)))))));
    const happenings = events.history || [];
    history.replaceChildren(happenings.length === 0
      ? el('p', { class: 'empty', text: 'Nothing yet.' })
      : el('ol', { class: 'history' }, happenings.map((h) => el('li', { 'data-kind': h.kind },
        when(h.at), ' ', el('strong', { text: h.kind }), ' ', h.message || ''))));
  });

  async function cancel(event) {
    event.target.disabled = true;
    try {
      await api('POST', `/api/executions/${encodeURIComponent(executionId)}/cancel`);
      refresh();
    } catch (error) {
      event.target.disabled = false;
      notice.replaceChildren(failure(error));
    }
  }

  const later = debounced(refresh);
  refresh();
  return {
    refresh,
    onChange: (kind, data) => { if (data.execution_id === executionId) later(); },
  };
}

// ---- start ----------------------------------------------------------------------------

async function start() {
  const path = location.pathname;
  const round = path.match(/^\/rounds\/([^/]+)$/);
  const execution = path.match(/^\/executions\/([^/]+)$/);
  if (round) view = roundView(decodeURIComponent(round[1]));
  else if (execution) view = executionView(decodeURIComponent(execution[1]));
  else view = inboxView();
  connect();
  const logout = document.getElementById('logout');
  logout.addEventListener('submit', async (event) => {
    event.preventDefault();
    await fetch('/logout', { method: 'POST', headers: { 'X-M3-CSRF': csrf },
      credentials: 'same-origin' });
    location.href = '/login';
  });
  fetch('/api/session', { credentials: 'same-origin' })
    .then((r) => r.json()).then((s) => { logout.hidden = !s.token_required; })
    .catch(() => {});
}

start();
