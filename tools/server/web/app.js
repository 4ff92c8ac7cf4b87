// k3 chat page: talks to this server's /v1/chat/completions with "stream": true (SSE) and keeps
// the conversations in localStorage. Answers and thinking are rendered as Markdown by marked,
// with raw HTML in them turned into text and the result sanitized by DOMPurify before it enters
// the page; code blocks are highlighted by highlight.js; math ($...$, \(...\), $$...$$,
// \[...\]) is typeset by KaTeX after that, and KaTeX's output is sanitized by DOMPurify in
// place. Everything else from the user or the model goes into the page through textContent
// only. The libraries come from Debian packages, embedded in the server and served from its
// /vendor/ (no other host is contacted).
'use strict';

(() => {
  const STORE = 'k3chat.v2';                     // localStorage: conversations + settings
  const OLD_STORE = 'k3chat.conversation.v1';    // the single conversation of earlier versions
  const KEY_STORE = 'k3chat.apiKey';             // sessionStorage: the API key (this tab only)
  const EXPORT_FORMAT = 'k3chat.conversations';  // the "format" field of an export file
  const MAX_IMPORT_BYTES = 64 << 20;
  const STATUSES = ['done', 'stopped', 'error', 'interrupted'];

  const $ = (id) => document.getElementById(id);
  const ui = {
    messages: $('messages'), empty: $('empty'), prompt: $('prompt'), composer: $('composer'),
    send: $('send'), stop: $('stop'), newChat: $('new-chat'), modelName: $('model-name'),
    thinking: $('thinking'), effort: $('effort'), temperature: $('temperature'),
    maxTokens: $('max-tokens'), apiKey: $('api-key'), systemPrompt: $('system-prompt'),
    convList: $('conv-list'), toggleSidebar: $('toggle-sidebar'), closeSidebar: $('close-sidebar'),
    backdrop: $('backdrop'), exportButton: $('export'), importButton: $('import'),
    importFile: $('import-file'), notice: $('notice'), help: $('help'), helpButton: $('help-button'),
    helpClose: $('help-close'), attach: $('attach'), attachFile: $('attach-file'),
    attachments: $('attachments'),
  };
  const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp'];
  let pending = [];  // pictures attached to the next message: data: URLs

  // A conversation: {id, title, titleSet (renamed by the user), system, created, updated,
  // messages}. A message: {role: 'user', content} or {role: 'assistant', content, reasoning,
  // tool_calls: [{id, name, arguments}], status, finish, error, usage, stats}; status is
  // 'streaming', 'done', 'stopped', 'error' or 'interrupted' (a reload cut the stream); usage is
  // the server's {prompt_tokens, completion_tokens}; stats {first_ms, total_ms} are measured here.
  let convs = [];
  let conv = null;         // the conversation on screen
  let controller = null;   // the AbortController of the request in flight
  const views = new Map(); // message -> its element (messages of `conv` only)

  // --- validation (storage and imports) -----------------------------------------------------

  const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
  const isCount = (v) => Number.isInteger(v) && v >= 0;
  const isTime = (v) => typeof v === 'number' && Number.isFinite(v) && v >= 0;

  function fail(where, what) {
    throw new Error(where + ': ' + what);
  }

  function optString(v, where, name, fallback) {
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'string') fail(where, `"${name}" must be a string`);
    return v;
  }

  function checkMessage(m, where) {
    if (!isObj(m)) fail(where, 'not an object');
    if (m.role !== 'user' && m.role !== 'assistant') fail(where, '"role" must be "user" or "assistant"');
    if (typeof m.content !== 'string') fail(where, '"content" must be a string');
    if (m.role === 'user') {
      const u = {role: 'user', content: m.content};
      if (m.images !== undefined) {
        if (!Array.isArray(m.images) || !m.images.every((x) => typeof x === 'string' && x.startsWith('data:image/')))
          fail(where, '"images" must be an array of data:image/... URLs');
        if (m.images.length) u.images = m.images.slice();
      }
      return u;
    }
    const a = {role: 'assistant', content: m.content, reasoning: optString(m.reasoning, where, 'reasoning', ''),
               tool_calls: [], status: 'done', finish: optString(m.finish, where, 'finish', null),
               error: optString(m.error, where, 'error', null), usage: null, stats: null};
    if (m.tool_calls !== undefined && m.tool_calls !== null) {
      if (!Array.isArray(m.tool_calls)) fail(where, '"tool_calls" must be an array');
      a.tool_calls = m.tool_calls.map((c, i) => {
        const w = `${where}, tool call ${i + 1}`;
        if (!isObj(c)) fail(w, 'not an object');
        return {id: optString(c.id, w, 'id', ''), name: optString(c.name, w, 'name', ''),
                arguments: optString(c.arguments, w, 'arguments', '')};
      });
    }
    if (m.status !== undefined) {
      if (m.status === 'streaming') a.status = 'interrupted';
      else if (STATUSES.includes(m.status)) a.status = m.status;
      else fail(where, '"status" must be one of ' + STATUSES.join(', '));
    }
    if (m.usage !== undefined && m.usage !== null) {
      if (!isObj(m.usage) || !isCount(m.usage.prompt_tokens) || !isCount(m.usage.completion_tokens))
        fail(where, '"usage" must have whole-number "prompt_tokens" and "completion_tokens"');
      a.usage = {prompt_tokens: m.usage.prompt_tokens, completion_tokens: m.usage.completion_tokens};
    }
    if (m.stats !== undefined && m.stats !== null) {
      if (!isObj(m.stats) || !isTime(m.stats.first_ms) || !isTime(m.stats.total_ms))
        fail(where, '"stats" must have numbers "first_ms" and "total_ms"');
      a.stats = {first_ms: m.stats.first_ms, total_ms: m.stats.total_ms};
    }
    return a;
  }

  function checkConversation(c, where) {
    if (!isObj(c)) fail(where, 'not an object');
    if (!Array.isArray(c.messages)) fail(where, '"messages" must be an array');
    const now = Date.now();
    const out = {
      id: optString(c.id, where, 'id', '') || newId(),
      title: optString(c.title, where, 'title', ''),
      titleSet: c.titleSet === true,
      system: optString(c.system, where, 'system', ''),
      created: isTime(c.created) ? c.created : now,
      updated: isTime(c.updated) ? c.updated : now,
      messages: c.messages.map((m, i) => checkMessage(m, `${where}, message ${i + 1}`)),
    };
    if (!out.titleSet) out.title = autoTitle(out);
    return out;
  }

  // --- conversations ------------------------------------------------------------------------

  function newId() {
    return Date.now().toString(36) + '-' + Math.random().toString(36).slice(2, 10);
  }

  function autoTitle(c) {
    const first = c.messages.find((m) => m.role === 'user');
    if (!first) return '';
    const line = first.content.trim().split('\n')[0].trim();
    return line.length > 48 ? line.slice(0, 47) + '\u2026' : line;
  }

  function titleOf(c) {
    return c.title || (c.messages.length ? 'Untitled' : 'New chat');
  }

  function makeConversation() {
    const now = Date.now();
    return {id: newId(), title: '', titleSet: false, system: '', created: now, updated: now, messages: []};
  }

  // The list: every conversation with a message, and the one on screen; newest first.
  function listed() {
    return convs.filter((c) => c.messages.length || c === conv).sort((a, b) => b.updated - a.updated);
  }

  // --- storage ------------------------------------------------------------------------------

  function readJson(storage, key) {
    try {
      return JSON.parse(storage.getItem(key) || 'null');
    } catch (e) {
      return null;  // unreadable: start afresh
    }
  }

  function load() {
    let saved = readJson(localStorage, STORE);
    let currentId = null;
    if (isObj(saved) && Array.isArray(saved.conversations)) {
      for (const [i, c] of saved.conversations.entries()) {
        try {
          convs.push(checkConversation(c, `stored conversation ${i + 1}`));
        } catch (e) {
          showNotice('A stored conversation could not be read and was left out (' + e.message + ')', true);
        }
      }
      currentId = saved.current;
    } else {
      const old = readJson(localStorage, OLD_STORE);
      if (isObj(old) && Array.isArray(old.messages)) {
        const msgs = [];
        for (const m of old.messages) {
          try {
            msgs.push(checkMessage(m, 'message'));
          } catch (e) { /* a malformed message of the old format: left out */ }
        }
        if (msgs.length) convs.push(checkConversation({messages: msgs}, 'conversation'));
      }
      saved = old;
    }
    // the conversation on screen before the reload, else the newest one (the migrated one)
    conv = convs.find((c) => c.id === currentId) || listed()[0] || null;
    if (!conv) {
      conv = makeConversation();
      convs.push(conv);
    }
    const s = (isObj(saved) && isObj(saved.settings)) ? saved.settings : {};
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
    const kept = convs.filter((c) => c.messages.length || c === conv);
    try {
      localStorage.setItem(STORE, JSON.stringify({conversations: kept, current: conv.id, settings}));
      localStorage.removeItem(OLD_STORE);
    } catch (e) {
      showNotice('Could not save the conversations in this browser: ' + e.message, true);
    }
  }

  // --- Markdown -----------------------------------------------------------------------------

  function escapeHtml(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
                    .replace(/"/g, '&quot;').replace(/'/g, '&#39;');
  }

  const PURIFY = {
    FORBID_TAGS: ['style', 'form', 'button', 'textarea', 'select', 'img', 'svg', 'math', 'video', 'audio',
                  'iframe', 'object', 'embed'],
    FORBID_ATTR: ['style', 'id', 'name'],  // no inline style (the CSP refuses it), no clobbered ids
    ADD_ATTR: ['target'],
  };

  // KaTeX's options: no command that makes links, loads images or sets classes, ids, styles or
  // data attributes (trust: false); LaTeX-compatibility warnings off; sizes (\rule, \kern, ...)
  // capped at 20 em and macro expansion at 1000 steps, so no input makes a huge box or loops.
  // A TeX error is thrown (throwOnError) and shown by renderMath as the source in an error span:
  // KaTeX's own error span colours itself with a style attribute, which the CSP refuses.
  const KATEX = {throwOnError: true, trust: false, strict: 'ignore', maxSize: 20, maxExpand: 1000,
                 output: 'htmlAndMathml'};

  // DOMPurify's configuration for KaTeX's output (sanitized in place): HTML, SVG (the square
  // roots, arrows and braces) and MathML (for screen readers, with KaTeX's semantics/annotation
  // wrapper); no links, images or foreign content.
  const MATH_PURIFY = {IN_PLACE: true, USE_PROFILES: {html: true, svg: true, mathMl: true},
                       ADD_TAGS: ['semantics', 'annotation'],
                       FORBID_TAGS: ['a', 'img', 'image', 'use', 'foreignobject', 'style', 'form', 'input', 'button'],
                       FORBID_ATTR: ['id', 'name', 'href', 'xlink:href', 'src', 'action']};
  let purifyingMath = false;  // true while DOMPurify sanitizes KaTeX's output (the style hook)

  // Math in Markdown, as marked extensions that take the math out before marked reads it (so
  // '\\', '_' and '*' inside math reach KaTeX as written) and leave a placeholder span with the
  // TeX in data-tex and the source with its delimiters as its text. Code spans and code blocks
  // are read by marked first, so '$' in code stays literal. Inline: $...$ (no space just inside
  // either '$', and no digit right after the closing one, so "$5 and $6" stays text) and
  // \(...\); display: $$...$$ and \[...\], on lines of their own (a block) or inside a line.
  // Inline math does not cross a backtick (a code span) or a blank line.
  const mathSpan = (raw, tex, display) =>
    `<span class="math-tex${display ? ' math-display' : ''}" data-display="${display ? 1 : 0}" ` +
    `data-tex="${escapeHtml(tex)}" data-raw="${escapeHtml(raw)}">${escapeHtml(raw)}</span>`;
  const INLINE_MATH = [
    {re: /^\$\$((?:\\[\s\S]|[^\\$`])+?)\$\$/, display: true},
    {re: /^\\\[((?:\\(?!\])[\s\S]|[^\\`])+?)\\\]/, display: true},
    {re: /^\\\(((?:\\(?!\))[\s\S]|[^\\`])+?)\\\)/, display: false},
    {re: /^\$((?:\\[\s\S]|[^\\$`])+?)\$(?!\d)/, display: false, tight: true},
  ];
  const BLOCK_MATH = /^ {0,3}(\$\$|\\\[)((?:[^\n]|\n(?![ \t]*\n))+?)(\$\$|\\\])[ \t]*(?:\n+|$)/;
  const MATH_EXTENSIONS = [
    {
      name: 'mathBlock', level: 'block',
      start: (src) => {
        const m = /^ {0,3}(?:\$\$|\\\[)/m.exec(src);
        return m ? m.index : undefined;
      },
      tokenizer(src) {
        const m = BLOCK_MATH.exec(src);
        if (!m || (m[1] === '$$') !== (m[3] === '$$') || !m[2].trim()) return undefined;
        return {type: 'mathBlock', raw: m[0], text: m[2], source: m[0].trim()};
      },
      renderer: (token) => `<div class="math-block">${mathSpan(token.source, token.text, true)}</div>\n`,
    },
    {
      name: 'math', level: 'inline',
      start: (src) => {
        const i = src.search(/\$|\\[([]/);
        return i < 0 ? undefined : i;
      },
      tokenizer(src) {
        for (const {re, display, tight} of INLINE_MATH) {
          const m = re.exec(src);
          if (!m || !m[1].trim()) continue;
          if (tight && (/^\s/.test(m[1]) || /\s$/.test(m[1]))) return undefined;
          return {type: 'math', raw: m[0], text: m[1], display};
        }
        return undefined;
      },
      renderer: (token) => mathSpan(token.raw, token.text, token.display),
    },
  ];

  // Returns null when a library did not load: the text is then shown as it is.
  const markdown = (() => {
    if (!window.marked || !window.DOMPurify) return null;
    const renderer = new marked.Renderer();
    renderer.html = (html) => escapeHtml(html);  // HTML written by the model is shown as text
    // Images would be fetched from wherever the model points: shown as a link instead.
    renderer.image = (href, title, text) =>
      `<a href="${escapeHtml(href || '')}">${text ? 'image: ' + text : escapeHtml(href || 'image')}</a>`;
    marked.setOptions({
      renderer, gfm: true, breaks: false, headerIds: false, mangle: false, langPrefix: 'hljs language-',
      highlight(code, lang) {
        const name = (lang || '').trim().toLowerCase();
        if (!window.hljs || !name || !hljs.getLanguage(name)) return null;  // marked escapes it
        try {
          return hljs.highlight(name, code, true).value;
        } catch (e) {
          return null;
        }
      },
    });
    // Debian maintains its highlight.js 9 package; this silences upstream's end-of-life notice
    // that 9.x prints to the console on the first highlight.
    if (window.hljs) hljs.configure({hideUpgradeWarningAcceptNoSupportOrSecurityUpdates: true});
    marked.use({extensions: MATH_EXTENSIONS});
    DOMPurify.addHook('afterSanitizeAttributes', (node) => {
      if (node.tagName === 'A') {
        node.setAttribute('target', '_blank');
        node.setAttribute('rel', 'noopener noreferrer');
      }
    });
    // DOMPurify removes each attribute and sets it again; a style attribute set that way is
    // refused by the page's CSP (no inline style). KaTeX's styles are set through the CSSOM,
    // which the CSP allows: while its output is sanitized they are left where they are.
    DOMPurify.addHook('uponSanitizeAttribute', (node, data) => {
      if (purifyingMath && data.attrName === 'style') data.forceKeepAttr = true;
    });
    return (text) => DOMPurify.sanitize(marked.parse(text), PURIFY);
  })();

  // Typesets each math placeholder of `box` (made by MATH_EXTENSIONS, already sanitized) with
  // KaTeX, then sanitizes KaTeX's output in place. Math KaTeX cannot read is shown as its source
  // (with its delimiters) in a .katex-error span titled with KaTeX's message; without KaTeX the
  // placeholder keeps showing the source.
  function renderMath(box) {
    if (!window.katex) return;
    for (const e of box.querySelectorAll('.math-tex')) {
      const tex = e.dataset.tex;
      if (typeof tex !== 'string') continue;
      try {
        katex.render(tex, e, Object.assign({displayMode: e.dataset.display === '1', macros: {}}, KATEX));
      } catch (err) {
        const shown = el('span', 'katex-error', e.dataset.raw || tex);
        shown.title = String(err && err.message);
        e.replaceChildren(shown);
        continue;
      }
      purifyingMath = true;
      try {
        DOMPurify.sanitize(e, MATH_PURIFY);
      } finally {
        purifyingMath = false;
      }
    }
  }

  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return;
    }
    // Plain http on another host than localhost: the older copy command.
    const t = el('textarea', 'copy-buffer');
    t.value = text;
    document.body.append(t);
    t.select();
    const ok = document.execCommand('copy');
    t.remove();
    if (!ok) throw new Error('the browser refused to copy');
  }

  function copyButton(cls, label, getText) {
    const b = el('button', 'act ' + cls, label);
    b.type = 'button';
    b.addEventListener('click', async () => {
      try {
        await copyText(getText());
        b.textContent = 'Copied';
      } catch (e) {
        b.textContent = 'Copy failed';
        showNotice('Could not copy: ' + e.message, true);
      }
      setTimeout(() => { b.textContent = label; }, 1500);
    });
    return b;
  }

  // Renders `text` into `box` (Markdown when the libraries loaded); the source text stays in
  // box.dataset.source. Each code block gets a header with its language and a Copy button.
  function renderMarkdown(box, text) {
    box.dataset.source = text;
    if (!markdown) {
      box.textContent = text;
      box.classList.add('plain');
      return;
    }
    box.innerHTML = markdown(text);
    for (const pre of box.querySelectorAll('pre')) {
      const code = pre.querySelector('code') || pre;
      const lang = [...code.classList].find((c) => c.startsWith('language-'));
      const wrap = el('div', 'code-block');
      const head = el('div', 'code-head');
      head.append(el('span', 'code-lang', lang ? lang.slice(9) : 'text'),
                  copyButton('code-copy', 'Copy', () => code.textContent));
      pre.replaceWith(wrap);
      wrap.append(head, pre);
    }
    renderMath(box);
  }

  // --- rendering ----------------------------------------------------------------------------

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function button(cls, label, title, onClick) {
    const b = el('button', cls, label);
    b.type = 'button';
    if (title) b.title = title;
    b.addEventListener('click', onClick);
    return b;
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
    const actions = el('div', 'actions');
    actions.append(copyButton('copy', 'Copy', () => m.content));
    if (m.role === 'assistant') {
      const think = el('details', 'thinking');
      think.append(el('summary', '', 'Thinking'), el('div', 'thinking-text markdown'));
      think.hidden = true;
      v.append(think, el('div', 'content markdown'), el('div', 'tool-calls'), el('div', 'error'), el('div', 'meta'));
      actions.append(button('act regenerate', 'Regenerate', 'Answer the last message again', () => regenerate(m)));
    } else {
      if (m.images && m.images.length) {
        const imgs = el('div', 'images');
        for (const url of m.images) {
          const img = el('img', 'thumb');
          img.src = url;
          img.alt = 'attached picture';
          imgs.append(img);
        }
        v.append(imgs);
      }
      v.append(el('div', 'content'));
      actions.append(button('act edit', 'Edit', 'Edit this message and send it again', () => startEdit(m, v)));
    }
    v.append(actions);
    return v;
  }

  function seconds(ms) {
    return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  }

  function metaText(m) {
    const meta = [];
    if (m.status === 'stopped') meta.push('stopped');
    if (m.status === 'interrupted') meta.push('interrupted (the page was reloaded)');
    if (m.finish) meta.push('finish: ' + m.finish);
    if (m.usage) {
      meta.push(m.usage.prompt_tokens + ' prompt tokens', m.usage.completion_tokens + ' generated');
      // The first token arrives after first_ms; the other n-1 during the rest of the time.
      const n = m.usage.completion_tokens;
      if (m.stats && n > 1 && m.stats.total_ms > m.stats.first_ms)
        meta.push(((n - 1) * 1000 / (m.stats.total_ms - m.stats.first_ms)).toFixed(1) + ' tokens/s');
    }
    if (m.stats) meta.push('first token ' + seconds(m.stats.first_ms), 'total ' + seconds(m.stats.total_ms));
    return meta.join(' \u00b7 ');
  }

  const STREAM_RENDER_MS = 60;  // while streaming, the Markdown of a message is redrawn at most this often

  function updateMarkdown(m, v) {
    const now = performance.now();
    if (m.status === 'streaming' && now - (v.k3RenderedAt || 0) < STREAM_RENDER_MS) {
      if (!v.k3Timer) v.k3Timer = setTimeout(() => { v.k3Timer = null; render(m); }, STREAM_RENDER_MS);
      return;
    }
    v.k3RenderedAt = now;
    const content = v.querySelector('.content');
    if (content.dataset.source !== m.content) renderMarkdown(content, m.content);
    const text = v.querySelector('.thinking-text');
    if (text.dataset.source !== m.reasoning) renderMarkdown(text, m.reasoning);
  }

  function updateView(m, v) {
    const last = conv.messages[conv.messages.length - 1] === m;
    v.querySelector('.regenerate, .edit').hidden = !!controller || (m.role === 'assistant' && !last);
    v.querySelector('.copy').hidden = m.role === 'assistant' && m.status === 'streaming';
    if (m.role !== 'assistant') {
      v.querySelector('.content').textContent = m.content;
      return;
    }
    v.dataset.status = m.status;
    updateMarkdown(m, v);
    const think = v.querySelector('.thinking');
    think.hidden = !m.reasoning;
    think.querySelector('summary').textContent =
        m.status === 'streaming' && !m.content && !m.tool_calls.length ? 'Thinking\u2026' : 'Thinking';
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
    v.querySelector('.meta').textContent = metaText(m);
  }

  function nearBottom() {
    const s = ui.messages;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  function render(m) {
    if (!conv.messages.includes(m)) return;  // another conversation's message
    const stick = nearBottom();
    let v = views.get(m);
    if (!v) {
      v = buildView(m);
      views.set(m, v);
      ui.messages.append(v);
    }
    updateView(m, v);
    ui.empty.hidden = conv.messages.length > 0;
    if (stick) ui.messages.scrollTop = ui.messages.scrollHeight;
  }

  function renderAll() {
    for (const v of views.values()) v.remove();
    views.clear();
    for (const m of conv.messages) render(m);
    ui.empty.hidden = conv.messages.length > 0;
    ui.systemPrompt.value = conv.system;
    ui.messages.scrollTop = ui.messages.scrollHeight;
  }

  function renderList() {
    ui.convList.replaceChildren(...listed().map((c) => {
      const li = el('li', 'conv' + (c === conv ? ' current' : ''));
      li.dataset.id = c.id;
      const open = button('conv-open', titleOf(c), '', () => switchTo(c));
      if (c === conv) open.setAttribute('aria-current', 'true');
      li.append(open,
                button('icon conv-rename', '\u270e', 'Rename', () => startRename(c, li, open)),
                button('icon conv-delete', '\u00d7', 'Delete', () => deleteConversation(c)));
      return li;
    }));
  }

  let noticeTimer = null;
  function showNotice(text, isError) {
    ui.notice.textContent = text;
    ui.notice.classList.toggle('is-error', !!isError);
    ui.notice.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { ui.notice.hidden = true; }, isError ? 12000 : 5000);
  }

  function setBusy(busy) {
    ui.send.disabled = busy;
    ui.stop.hidden = !busy;
    for (const m of conv.messages) render(m);  // Regenerate / Edit only while idle
  }

  // --- the request --------------------------------------------------------------------------

  function headers() {
    const h = {'Content-Type': 'application/json'};
    const key = ui.apiKey.value.trim();
    if (key) h.Authorization = 'Bearer ' + key;
    return h;
  }

  // The conversation as OpenAI messages: the system prompt, user turns, and assistant turns that
  // produced text or tool calls (reasoning kept: K3 is trained with its past thinking in the history).
  function history(c) {
    const out = [];
    if (c.system.trim()) out.push({role: 'system', content: c.system});
    for (const m of c.messages) {
      if (m.role === 'user') {
        if (m.images && m.images.length)  // OpenAI image_url parts (data: URLs), then the text
          out.push({role: 'user', content: [...m.images.map((url) => ({type: 'image_url', image_url: {url}})),
                                            {type: 'text', text: m.content}]});
        else out.push({role: 'user', content: m.content});
      } else if (m.status !== 'streaming' && (m.content || m.tool_calls.length)) {
        const a = {role: 'assistant', content: m.content};
        if (m.reasoning) a.reasoning_content = m.reasoning;
        if (m.tool_calls.length)
          a.tool_calls = m.tool_calls.map((t) => ({id: t.id, type: 'function',
                                                  function: {name: t.name, arguments: t.arguments}}));
        out.push(a);
      }
    }
    return out;
  }

  function requestBody(c) {
    const body = {messages: history(c), stream: true, stream_options: {include_usage: true},
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

  // Applies one chunk; returns true when it carried generated output.
  function applyChunk(m, j) {
    if (j.error) {
      m.error = `Error ${j.error.code || ''} (${j.error.type || 'error'}): ${j.error.message}`;
      return false;
    }
    if (isObj(j.usage) && isCount(j.usage.prompt_tokens) && isCount(j.usage.completion_tokens))
      m.usage = {prompt_tokens: j.usage.prompt_tokens, completion_tokens: j.usage.completion_tokens};
    let output = false;
    for (const ch of j.choices || []) {
      const d = ch.delta || {};
      if (typeof d.reasoning_content === 'string' && d.reasoning_content) {
        m.reasoning += d.reasoning_content;
        output = true;
      }
      if (typeof d.content === 'string' && d.content) {
        m.content += d.content;
        output = true;
      }
      for (const tc of d.tool_calls || []) {
        let c = m.tool_calls[tc.index];
        if (!c) c = m.tool_calls[tc.index] = {id: tc.id || '', name: '', arguments: ''};
        if (tc.id) c.id = tc.id;
        if (tc.function && tc.function.name) c.name += tc.function.name;
        if (tc.function && tc.function.arguments) c.arguments += tc.function.arguments;
        output = true;
      }
      if (ch.finish_reason) m.finish = ch.finish_reason;
    }
    return output;
  }

  // Reads the SSE body: events separated by a blank line, "data: " lines, ": comments".
  async function readStream(res, m, onOutput) {
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
        if (applyChunk(m, j)) onOutput();
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

  // Asks for an answer to the conversation `c` as it is now.
  async function answer(c) {
    const body = requestBody(c);
    const m = {role: 'assistant', content: '', reasoning: '', tool_calls: [], status: 'streaming',
               finish: null, error: null, usage: null, stats: null};
    c.messages.push(m);
    c.updated = Date.now();
    controller = new AbortController();
    setBusy(true);
    renderList();
    save();
    const t0 = performance.now();
    let first = null;
    try {
      const res = await fetch('v1/chat/completions', {method: 'POST', headers: headers(),
                                                      body: JSON.stringify(body), signal: controller.signal});
      if (!res.ok) {
        m.error = await errorText(res);
      } else {
        await readStream(res, m, () => { if (first === null) first = performance.now(); });
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
      if (first !== null) m.stats = {first_ms: first - t0, total_ms: performance.now() - t0};
      controller = null;
      setBusy(false);
      render(m);
      save();
    }
  }

  function send(text, images) {
    const c = conv;
    const m = {role: 'user', content: text};
    if (images && images.length) m.images = images;
    c.messages.push(m);
    if (!c.titleSet) c.title = autoTitle(c);
    render(c.messages[c.messages.length - 1]);
    answer(c);
  }

  // Drops the messages of the conversation on screen from index i on.
  function truncate(i) {
    for (const m of conv.messages.splice(i)) {
      const v = views.get(m);
      if (v) v.remove();
      views.delete(m);
    }
  }

  function regenerate(m) {
    const i = conv.messages.indexOf(m);
    if (controller || i < 0 || i !== conv.messages.length - 1) return;
    truncate(i);
    answer(conv);
  }

  function startEdit(m, v) {
    if (controller || v.querySelector('.edit-box')) return;
    const box = el('div', 'edit-box');
    const text = el('textarea', 'edit-text');
    text.value = m.content;
    text.rows = Math.min(12, Math.max(2, m.content.split('\n').length));
    const done = () => { box.remove(); v.classList.remove('editing'); };
    const resend = () => {
      const i = conv.messages.indexOf(m);
      if (controller || i < 0 || !text.value.trim()) return;
      done();
      truncate(i);
      send(text.value, m.images);
    };
    text.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        resend();
      } else if (e.key === 'Escape') {
        e.stopPropagation();
        done();
      }
    });
    const buttons = el('div', 'edit-buttons');
    buttons.append(button('edit-send', 'Send', 'Send the edited message (the messages after it are dropped)', resend),
                   button('edit-cancel', 'Cancel', '', done));
    box.append(text, buttons);
    v.classList.add('editing');
    v.querySelector('.content').after(box);
    text.focus();
  }

  function stop() {
    if (controller) controller.abort();
  }

  // --- conversations: switching, new, rename, delete, export, import -------------------------

  function switchTo(c) {
    closeSidebar();
    if (c === conv) return;
    stop();
    conv = c;
    renderAll();
    renderList();
    save();
  }

  function newChat() {
    closeSidebar();
    if (!conv.messages.length) {  // already a new one
      ui.prompt.focus();
      return;
    }
    stop();
    conv = makeConversation();
    convs.push(conv);
    renderAll();
    renderList();
    save();
    ui.prompt.focus();
  }

  function startRename(c, li, open) {
    const input = el('input', 'conv-title-input');
    input.value = titleOf(c);
    input.setAttribute('aria-label', 'Conversation name');
    let finished = false;
    const finish = (keep) => {
      if (finished) return;
      finished = true;
      if (keep) {
        const t = input.value.trim();
        c.titleSet = !!t;
        c.title = t || autoTitle(c);
        save();
      }
      renderList();
    };
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        finish(true);
      } else if (e.key === 'Escape') {
        e.stopPropagation();
        finish(false);
      }
    });
    input.addEventListener('blur', () => finish(true));
    open.replaceWith(input);
    input.focus();
    input.select();
  }

  function deleteConversation(c) {
    if (!window.confirm(`Delete the conversation "${titleOf(c)}"? This cannot be undone.`)) return;
    if (c === conv) stop();
    convs = convs.filter((x) => x !== c);
    if (c === conv) {
      conv = listed().find((x) => x.messages.length) || null;
      if (!conv) {
        conv = makeConversation();
        convs.push(conv);
      }
      renderAll();
    }
    renderList();
    save();
  }

  function exportAll() {
    const data = {format: EXPORT_FORMAT, version: 1, exported: new Date().toISOString(),
                  conversations: convs.filter((c) => c.messages.length)};
    const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 1)], {type: 'application/json'}));
    const a = document.createElement('a');
    a.href = url;
    a.download = 'k3-chat-' + data.exported.slice(0, 10) + '.json';
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    showNotice(`Exported ${data.conversations.length} conversation(s) to ${a.download}`);
  }

  // Adds the conversations of an export file; nothing is added unless the whole file is valid.
  function importText(text) {
    let data;
    try {
      data = JSON.parse(text);
    } catch (e) {
      throw new Error('the file is not JSON (' + e.message + ')');
    }
    if (!isObj(data) || data.format !== EXPORT_FORMAT || !Array.isArray(data.conversations))
      throw new Error(`not a k3 chat export (expected an object with "format": "${EXPORT_FORMAT}" and a "conversations" array)`);
    if (data.version !== 1) throw new Error(`unknown export version ${JSON.stringify(data.version)} (this page reads version 1)`);
    const got = data.conversations.map((c, i) => checkConversation(c, `conversation ${i + 1}`))
                                  .filter((c) => c.messages.length);
    const ids = new Set(convs.map((c) => c.id));
    for (const c of got) {
      if (ids.has(c.id)) c.id = newId();  // an import never replaces a conversation
      ids.add(c.id);
      convs.push(c);
    }
    return got.length;
  }

  async function importFile(file) {
    try {
      if (file.size > MAX_IMPORT_BYTES) throw new Error(`the file is larger than ${MAX_IMPORT_BYTES >> 20} MiB`);
      const n = importText(await file.text());
      renderList();
      save();
      showNotice(`Imported ${n} conversation(s) from ${file.name}`);
    } catch (e) {
      showNotice(`Import of ${file.name} failed: ${e.message}`, true);
    }
  }

  // --- sidebar (a column on wide screens, a drawer on narrow ones) and help -----------------

  const narrow = window.matchMedia('(max-width: 48em)');

  function closeSidebar() {
    if (narrow.matches) document.body.classList.remove('side-open');
  }

  function toggleSidebar() {
    document.body.classList.toggle(narrow.matches ? 'side-open' : 'side-closed');
  }

  // --- wiring -------------------------------------------------------------------------------

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

  // --- Pictures: file picker, paste, drag and drop; sent as image_url data: URLs ---------------
  function renderAttachments() {
    ui.attachments.replaceChildren();
    pending.forEach((url, i) => {
      const box = el('div', 'attachment');
      const img = el('img', 'thumb');
      img.src = url;
      img.alt = 'picture to send';
      box.append(img, button('remove-attachment', '\u00d7', 'Remove this picture', () => {
        pending.splice(i, 1);
        renderAttachments();
      }));
      ui.attachments.append(box);
    });
    ui.attachments.hidden = pending.length === 0;
  }

  function attachFiles(files) {
    for (const f of files) {
      if (!IMAGE_TYPES.includes(f.type)) {
        showNotice(`${f.name || 'The pasted file'}: not a PNG, JPEG or WebP picture (${f.type || 'unknown type'})`, true);
        continue;
      }
      const r = new FileReader();
      r.onload = () => {
        pending.push(r.result);
        renderAttachments();
      };
      r.onerror = () => showNotice(`${f.name}: could not be read`, true);
      r.readAsDataURL(f);
    }
  }

  ui.attach.addEventListener('click', () => ui.attachFile.click());
  ui.attachFile.addEventListener('change', () => {
    attachFiles([...ui.attachFile.files]);
    ui.attachFile.value = '';
  });
  ui.prompt.addEventListener('paste', (e) => {
    const files = [...(e.clipboardData ? e.clipboardData.files : [])];
    if (files.length) {
      e.preventDefault();
      attachFiles(files);
    }
  });
  ui.composer.addEventListener('dragover', (e) => {
    e.preventDefault();
    ui.composer.classList.add('dragging');
  });
  ui.composer.addEventListener('dragleave', () => ui.composer.classList.remove('dragging'));
  ui.composer.addEventListener('drop', (e) => {
    e.preventDefault();
    ui.composer.classList.remove('dragging');
    if (e.dataTransfer) attachFiles([...e.dataTransfer.files]);
  });

  ui.composer.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = ui.prompt.value;
    if ((!text.trim() && !pending.length) || controller) return;
    ui.prompt.value = '';
    const images = pending;
    pending = [];
    renderAttachments();
    send(text, images);
  });
  ui.prompt.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      ui.composer.requestSubmit();
    }
  });
  document.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && e.shiftKey && e.code === 'KeyO') {
      e.preventDefault();
      newChat();
    } else if (e.key === 'Escape' && !ui.help.open && controller) {
      stop();
    }
  });
  ui.stop.addEventListener('click', stop);
  ui.newChat.addEventListener('click', newChat);
  ui.toggleSidebar.addEventListener('click', toggleSidebar);
  ui.closeSidebar.addEventListener('click', closeSidebar);
  ui.backdrop.addEventListener('click', closeSidebar);
  ui.exportButton.addEventListener('click', exportAll);
  ui.importButton.addEventListener('click', () => ui.importFile.click());
  ui.importFile.addEventListener('change', async () => {
    const f = ui.importFile.files[0];
    if (f) await importFile(f);
    ui.importFile.value = '';
  });
  ui.helpButton.addEventListener('click', () => ui.help.showModal());
  ui.helpClose.addEventListener('click', () => ui.help.close());
  ui.systemPrompt.addEventListener('input', () => {
    conv.system = ui.systemPrompt.value;
    save();
  });
  for (const input of [ui.thinking, ui.effort, ui.temperature, ui.maxTokens])
    input.addEventListener('input', save);
  ui.apiKey.addEventListener('input', () => sessionStorage.setItem(KEY_STORE, ui.apiKey.value.trim()));
  ui.apiKey.addEventListener('change', showModel);

  load();
  renderAll();
  renderList();
  setBusy(false);
  showModel();
  if (!markdown) showNotice('The Markdown libraries did not load: answers are shown as plain text.', true);
  document.documentElement.dataset.ready = '1';  // for tests: the script ran
})();
