// k3 chat page: talks to this server's /v1/chat/completions with "stream": true (SSE) and keeps
// the conversation in localStorage. Every text from the user or the model goes into the page
// through textContent only, never as HTML.
'use strict';

(() => {
  const STORE = 'k3chat.conversation.v1';  // localStorage: messages + settings
  const KEY_STORE = 'k3chat.apiKey';       // sessionStorage: the API key (kept for this tab only)

  const $ = (id) => document.getElementById(id);
  const ui = {
    messages: $('messages'), empty: $('empty'), prompt: $('prompt'), composer: $('composer'),
    send: $('send'), stop: $('stop'), newChat: $('new-chat'), modelName: $('model-name'),
    thinking: $('thinking'), effort: $('effort'), temperature: $('temperature'),
    maxTokens: $('max-tokens'), apiKey: $('api-key'),
  };

  // A message: {role: 'user', content} or {role: 'assistant', content, reasoning,
  // tool_calls: [{id, name, arguments}], status, finish, error, usage}; status is 'streaming',
  // 'done', 'stopped', 'error' or 'interrupted' (a reload cut the stream).
  let messages = [];
  let controller = null;  // the AbortController of the request in flight
  const views = new Map();  // message -> its element

  // --- storage ------------------------------------------------------------------------------

  function load() {
    let saved = null;
    try {
      saved = JSON.parse(localStorage.getItem(STORE) || 'null');
    } catch (e) {
      saved = null;  // unreadable: start afresh
    }
    if (saved && Array.isArray(saved.messages)) {
      messages = saved.messages.filter((m) => m && (m.role === 'user' || m.role === 'assistant'));
      for (const m of messages) {
        m.content = typeof m.content === 'string' ? m.content : '';
        if (m.role === 'assistant') {
          m.reasoning = typeof m.reasoning === 'string' ? m.reasoning : '';
          m.tool_calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
          if (m.status === 'streaming') m.status = 'interrupted';
        }
      }
    }
    const s = (saved && saved.settings) || {};
    if (typeof s.thinking === 'boolean') ui.thinking.checked = s.thinking;
    if (['low', 'high', 'max'].includes(s.effort)) ui.effort.value = s.effort;
    if (typeof s.temperature === 'string') ui.temperature.value = s.temperature;
    if (typeof s.maxTokens === 'string') ui.maxTokens.value = s.maxTokens;
    ui.apiKey.value = sessionStorage.getItem(KEY_STORE) || '';
  }

  function save() {
    const settings = {
      thinking: ui.thinking.checked, effort: ui.effort.value,
      temperature: ui.temperature.value, maxTokens: ui.maxTokens.value,
    };
    try {
      localStorage.setItem(STORE, JSON.stringify({messages, settings}));
    } catch (e) {
      showPageError('Could not save the conversation in this browser: ' + e.message);
    }
  }

  // --- rendering (textContent only) ---------------------------------------------------------

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function prettyArguments(args) {
    try {
      return JSON.stringify(JSON.parse(args), null, 2);
    } catch (e) {
      return args;  // still streaming, or not JSON: shown as it came
    }
  }

  function buildView(m) {
    const v = el('article', 'msg ' + m.role);
    v.dataset.role = m.role;
    v.append(el('div', 'role', m.role === 'user' ? 'You' : 'Assistant'));
    if (m.role === 'assistant') {
      const think = el('details', 'thinking');
      think.append(el('summary', '', 'Thinking'), el('div', 'thinking-text'));
      think.hidden = true;
      v.append(think, el('div', 'content'), el('div', 'tool-calls'), el('div', 'error'), el('div', 'meta'));
    } else {
      v.append(el('div', 'content'));
    }
    return v;
  }

  function updateView(m, v) {
    v.querySelector('.content').textContent = m.content;
    if (m.role !== 'assistant') return;
    v.dataset.status = m.status;
    const think = v.querySelector('.thinking');
    think.hidden = !m.reasoning;
    think.querySelector('summary').textContent =
        m.status === 'streaming' && !m.content && !m.tool_calls.length ? 'Thinking\u2026' : 'Thinking';
    think.querySelector('.thinking-text').textContent = m.reasoning;
    const tools = v.querySelector('.tool-calls');
    tools.replaceChildren(...m.tool_calls.map((c) => {
      const b = el('div', 'tool-call');
      b.dataset.tool = c.name || '';
      b.append(el('div', 'tool-name', 'Tool call: ' + (c.name || '?')), el('pre', 'tool-args', prettyArguments(c.arguments)));
      return b;
    }));
    const err = v.querySelector('.error');
    err.hidden = !m.error;
    err.textContent = m.error || '';
    const meta = [];
    if (m.status === 'stopped') meta.push('stopped');
    if (m.status === 'interrupted') meta.push('interrupted (the page was reloaded)');
    if (m.finish) meta.push('finish: ' + m.finish);
    if (m.usage) meta.push(m.usage.completion_tokens + ' tokens');
    v.querySelector('.meta').textContent = meta.join(' \u00b7 ');
  }

  function nearBottom() {
    const s = ui.messages;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  function render(m) {
    if (!messages.includes(m)) return;  // dropped by "New chat" while it streamed
    const stick = nearBottom();
    let v = views.get(m);
    if (!v) {
      v = buildView(m);
      views.set(m, v);
      ui.messages.append(v);
    }
    updateView(m, v);
    ui.empty.hidden = messages.length > 0;
    if (stick) ui.messages.scrollTop = ui.messages.scrollHeight;
  }

  function renderAll() {
    for (const v of views.values()) v.remove();
    views.clear();
    for (const m of messages) render(m);
    ui.empty.hidden = messages.length > 0;
  }

  function showPageError(text) {
    const p = el('p', 'error page-error', text);
    ui.messages.append(p);
  }

  function setBusy(busy) {
    ui.send.disabled = busy;
    ui.stop.hidden = !busy;
  }

  // --- the request --------------------------------------------------------------------------

  function headers() {
    const h = {'Content-Type': 'application/json'};
    const key = ui.apiKey.value.trim();
    if (key) h.Authorization = 'Bearer ' + key;
    return h;
  }

  // The conversation as OpenAI messages: user turns, and assistant turns that produced text or
  // tool calls (reasoning kept: K3 is trained with its past thinking in the history).
  function history() {
    const out = [];
    for (const m of messages) {
      if (m.role === 'user') {
        out.push({role: 'user', content: m.content});
      } else if (m.status !== 'streaming' && (m.content || m.tool_calls.length)) {
        const a = {role: 'assistant', content: m.content};
        if (m.reasoning) a.reasoning_content = m.reasoning;
        if (m.tool_calls.length)
          a.tool_calls = m.tool_calls.map((c) => ({id: c.id, type: 'function',
                                                  function: {name: c.name, arguments: c.arguments}}));
        out.push(a);
      }
    }
    return out;
  }

  function requestBody() {
    const body = {messages: history(), stream: true, stream_options: {include_usage: true},
                  chat_template_kwargs: {thinking: ui.thinking.checked}};
    if (ui.thinking.checked) body.reasoning_effort = ui.effort.value;
    const t = ui.temperature.value.trim();
    if (t !== '') body.temperature = Number(t);
    const n = ui.maxTokens.value.trim();
    if (n !== '') body.max_tokens = Number(n);
    return body;
  }

  // An OpenAI error body ({"error": {"message", "type", ...}}) or any other answer, as one line.
  async function errorText(res) {
    const text = await res.text();
    try {
      const e = JSON.parse(text).error;
      if (e && e.message) return `Error ${res.status} (${e.type || 'error'}): ${e.message}`;
    } catch (e) { /* not JSON */ }
    return `Error ${res.status} ${res.statusText}` + (text ? ': ' + text.slice(0, 500) : '');
  }

  function applyChunk(m, j) {
    if (j.error) {
      m.error = `Error ${j.error.code || ''} (${j.error.type || 'error'}): ${j.error.message}`;
      return;
    }
    if (j.usage) m.usage = j.usage;
    for (const ch of j.choices || []) {
      const d = ch.delta || {};
      if (typeof d.reasoning_content === 'string') m.reasoning += d.reasoning_content;
      if (typeof d.content === 'string') m.content += d.content;
      for (const tc of d.tool_calls || []) {
        let c = m.tool_calls[tc.index];
        if (!c) c = m.tool_calls[tc.index] = {id: tc.id || '', name: '', arguments: ''};
        if (tc.id) c.id = tc.id;
        if (tc.function && tc.function.name) c.name += tc.function.name;
        if (tc.function && tc.function.arguments) c.arguments += tc.function.arguments;
      }
      if (ch.finish_reason) m.finish = ch.finish_reason;
    }
  }

  // Reads the SSE body: events separated by a blank line, "data: " lines, ": comments".
  async function readStream(res, m) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let lastSave = 0;
    for (;;) {
      const {value, done} = await reader.read();
      buf += decoder.decode(value || new Uint8Array(), {stream: !done});
      const events = buf.split(/\r?\n\r?\n/);
      buf = events.pop();
      for (const ev of events) {
        const data = ev.split(/\r?\n/).filter((l) => l.startsWith('data:'))
                       .map((l) => l.slice(l.startsWith('data: ') ? 6 : 5)).join('\n');
        if (!data) continue;  // a comment (keep-alive)
        if (data === '[DONE]') return;
        let j;
        try {
          j = JSON.parse(data);
        } catch (e) {
          m.error = 'The server sent an event that is not JSON: ' + data.slice(0, 200);
          continue;
        }
        applyChunk(m, j);
      }
      render(m);
      if (Date.now() - lastSave > 500) {
        save();
        lastSave = Date.now();
      }
      if (done) {
        if (!m.error) m.error = 'The stream ended without [DONE]';
        return;
      }
    }
  }

  async function send(text) {
    messages.push({role: 'user', content: text});
    render(messages[messages.length - 1]);
    const body = requestBody();
    const m = {role: 'assistant', content: '', reasoning: '', tool_calls: [], status: 'streaming',
               finish: null, error: null, usage: null};
    messages.push(m);
    render(m);
    save();
    controller = new AbortController();
    setBusy(true);
    try {
      const res = await fetch('v1/chat/completions', {method: 'POST', headers: headers(),
                                                      body: JSON.stringify(body), signal: controller.signal});
      if (!res.ok) {
        m.error = await errorText(res);
      } else {
        await readStream(res, m);
      }
      m.status = m.error ? 'error' : 'done';
    } catch (e) {
      if (e.name === 'AbortError') {
        m.status = 'stopped';
      } else {
        m.status = 'error';
        m.error = 'Request failed: ' + e.message;
      }
    } finally {
      controller = null;
      setBusy(false);
      render(m);
      save();
    }
  }

  function stop() {
    if (controller) controller.abort();
  }

  function newChat() {
    stop();
    messages = [];
    renderAll();
    for (const p of ui.messages.querySelectorAll('.page-error')) p.remove();
    save();
    ui.prompt.focus();
  }

  async function showModel() {
    try {
      const res = await fetch('v1/models', {headers: headers()});
      if (!res.ok) {
        ui.modelName.textContent = res.status === 401 ? '(API key needed)' : '';
        return;
      }
      const j = await res.json();
      ui.modelName.textContent = (j.data && j.data[0] && j.data[0].id) || '';
    } catch (e) {
      ui.modelName.textContent = '(server unreachable)';
    }
  }

  // --- wiring -------------------------------------------------------------------------------

  ui.composer.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = ui.prompt.value;
    if (!text.trim() || controller) return;
    ui.prompt.value = '';
    send(text);
  });
  ui.prompt.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      ui.composer.requestSubmit();
    }
  });
  ui.stop.addEventListener('click', stop);
  ui.newChat.addEventListener('click', newChat);
  for (const input of [ui.thinking, ui.effort, ui.temperature, ui.maxTokens])
    input.addEventListener('input', save);
  ui.apiKey.addEventListener('input', () => sessionStorage.setItem(KEY_STORE, ui.apiKey.value.trim()));
  ui.apiKey.addEventListener('change', showModel);

  load();
  renderAll();
  setBusy(false);
  showModel();
  document.documentElement.dataset.ready = '1';  // for tests: the script ran
})();
