// The clef playground (docs/serving.md, "The playground"): builds a SystemOne request from the
// form, POSTs it to /v1/systemone on the server that served this page, and shows the answers as
// bars with the response's own numbers, the request as JSON and as a curl command, and the raw
// response. The form is kept in localStorage; a whole request can be pasted in and copied out.
// No library, no build step, nothing fetched from anywhere but this server.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  // The question types come from the server's table (/question_types.js, loaded first):
  // {name, shape, label}. The page goes by shape: flag (a yes/no, no options), keyed (option id →
  // description, one chosen), levels (ordered descriptions, a score); it never spells a name.
  const TYPES = CLEF_QUESTION_TYPES;
  const TYPE_LABEL = Object.fromEntries(TYPES.map((t) => [t.name, t.label]));
  const SHAPE = Object.fromEntries(TYPES.map((t) => [t.name, t.shape]));
  const TYPE_OF = Object.fromEntries(TYPES.map((t) => [t.shape, t.name])); // shape → the type with it
  const NEW_OPTIONS = { flag: [], keyed: [['', null], ['', null]], levels: [[null, 'low'], [null, 'medium'], [null, 'high']] };
  const IMAGE_TYPES = /^image\/(png|jpeg|webp|gif)$/;
  const VIDEO_NAME = /\.(mp4|m4v|mov|mkv|webm|avi|ogv)$/i;
  const SAVE_KEY = 'clef-playground-form-v1'; // localStorage: the form, kept across reloads
  const KEY_KEY = 'clef-playground-api-key'; // sessionStorage: the API key, this tab only
  const images = []; // {name, size, url} in request order
  const videos = []; // the same for "videos"
  let extra = []; // [key, raw JSON text]: top-level keys of a pasted request the form has no field for
  let busy = false;
  let jsonDirty = false; // the JSON panel was edited and not yet put into the form

  // A mistake the page sees itself; `field` is the input to point at.
  class UserError extends Error {
    constructor(message, field) {
      super(message);
      this.field = field;
    }
  }

  // JSON string literal of s (JSON.stringify escapes exactly what JSON needs).
  const J = (s) => JSON.stringify(String(s));

  // A number as Python's repr prints it in the response (1.0, 0.25, 0.0001): the bars show the
  // response's own numbers, not a rounding of them. JavaScript's shortest round-trip form is
  // Python's for these values except that Python keeps ".0" on whole numbers.
  function pyNum(x) {
    if (typeof x !== 'number') return String(x);
    if (Number.isInteger(x) && Math.abs(x) < 1e16) return x.toFixed(1);
    return String(x);
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function showError(box, msg) {
    box.textContent = msg;
    box.hidden = !msg;
  }

  const kib = (bytes) => Math.max(1, Math.ceil(bytes / 1024)) + ' KiB';

  // ---------------------------------------------------------------- JSON that keeps its order

  // JSON.parse puts integer-like keys first and turns 12345678901234567890 into a double; a pasted
  // request must come back out with its questions, options and numbers as written. This reads
  // (already valid) JSON into nodes: {t: 'obj', pairs: [[key, node]]}, {t: 'arr', items},
  // {t: 'str', v}, or a number/true/false/null kept as its source text {t: 'lit', raw}.
  function parseOrdered(text) {
    JSON.parse(text); // the browser's own message (with the position) for invalid JSON
    const token = /"[^"\\]*(?:\\.[^"\\]*)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null/y;
    let i = 0;
    const ws = () => {
      while (i < text.length && ' \t\n\r'.includes(text[i])) i++;
    };
    const literal = () => {
      token.lastIndex = i;
      const m = token.exec(text);
      i = token.lastIndex;
      return m[0];
    };
    function value() {
      ws();
      const c = text[i];
      if (c === '{' || c === '[') {
        const obj = c === '{';
        const node = obj ? { t: 'obj', pairs: [] } : { t: 'arr', items: [] };
        i++;
        ws();
        if (text[i] === (obj ? '}' : ']')) {
          i++;
          return node;
        }
        for (;;) {
          if (obj) {
            ws();
            const k = JSON.parse(literal());
            ws();
            i++; // ':'
            node.pairs.push([k, value()]);
          } else {
            node.items.push(value());
          }
          ws();
          if (text[i++] !== ',') return node; // '}' or ']'
        }
      }
      const raw = literal();
      return c === '"' ? { t: 'str', v: JSON.parse(raw) } : { t: 'lit', raw };
    }
    return value();
  }

  // Pretty JSON text of a node (two-space indent), order and number spelling as parsed.
  function pretty(n, ind = '') {
    const in2 = ind + '  ';
    if (n.t === 'obj')
      return n.pairs.length
        ? '{\n' + n.pairs.map(([k, v]) => in2 + J(k) + ': ' + pretty(v, in2)).join(',\n') + '\n' + ind + '}' : '{}';
    if (n.t === 'arr')
      return n.items.length ? '[\n' + n.items.map((v) => in2 + pretty(v, in2)).join(',\n') + '\n' + ind + ']' : '[]';
    return n.t === 'str' ? J(n.v) : n.raw;
  }

  // Compact JSON text of a node (what is sent).
  function compact(n) {
    if (n.t === 'obj') return '{' + n.pairs.map(([k, v]) => J(k) + ':' + compact(v)).join(',') + '}';
    if (n.t === 'arr') return '[' + n.items.map(compact).join(',') + ']';
    return n.t === 'str' ? J(n.v) : n.raw;
  }

  const kindOf = (n) => (n.t === 'obj' ? 'an object' : n.t === 'arr' ? 'a list' : n.t === 'str' ? 'a string' : n.raw);

  // ---------------------------------------------------------------- questions

  // An input whose empty value means "" (not "absent"): a pasted request said "" there.
  function setField(input, v) {
    input.value = v || '';
    if (v === '') input.dataset.empty = '1';
    else delete input.dataset.empty;
  }
  const fieldValue = (input) => (input.value !== '' ? input.value : input.dataset.empty ? '' : null);

  function uniqueId(type) {
    const used = new Set(Array.from(document.querySelectorAll('#questions .q-id'), (i) => i.value));
    for (let n = 1; ; n++) if (!used.has(type + n)) return type + n;
  }

  function renumber(fs) {
    fs.querySelectorAll('.option').forEach((row, i) => {
      row.querySelector('.o-level').textContent = fs.dataset.shape === 'levels' ? String(i) : '';
    });
  }

  function addOption(fs, id, description) {
    const row = $('option-template').content.firstElementChild.cloneNode(true);
    const idInput = row.querySelector('.o-id');
    if (fs.dataset.shape === 'levels') idInput.remove();
    else idInput.value = id || '';
    const d = row.querySelector('.o-description');
    setField(d, description);
    if (fs.dataset.shape === 'levels') d.setAttribute('aria-label', 'level description');
    row.querySelector('.remove-option').addEventListener('click', () => {
      row.remove();
      renumber(fs);
      changed();
    });
    fs.querySelector('.options').appendChild(row);
    renumber(fs);
    return row;
  }

  function addQuestion(type, id, instructions, options) {
    const fs = $('question-template').content.firstElementChild.cloneNode(true);
    fs.dataset.type = type;
    fs.dataset.shape = SHAPE[type];
    fs.querySelector('.q-type').textContent = TYPE_LABEL[type];
    fs.querySelector('.q-id').value = id === undefined ? uniqueId(type) : id; // "" stays ""
    setField(fs.querySelector('.q-instructions'), instructions);
    const add = fs.querySelector('.add-option');
    if (SHAPE[type] === 'flag') {
      add.remove();
    } else {
      add.textContent = SHAPE[type] === 'keyed' ? '+ option' : '+ level';
      add.addEventListener('click', () => {
        addOption(fs, '', null).querySelector('input').focus();
        changed();
      });
    }
    fs.querySelector('.remove-question').addEventListener('click', () => {
      fs.remove();
      changed();
    });
    $('questions').appendChild(fs);
    for (const [oid, desc] of options || []) addOption(fs, oid, desc);
    return fs;
  }

  // ---------------------------------------------------------------- images and videos

  function readFile(f) {
    return new Promise((resolve, reject) => {
      const rd = new FileReader();
      rd.onload = () => resolve(rd.result);
      rd.onerror = () => reject(rd.error || new Error('unreadable'));
      rd.readAsDataURL(f);
    });
  }

  async function addFiles(files) {
    const problems = [];
    for (const f of Array.from(files)) {
      const isImage = IMAGE_TYPES.test(f.type);
      const isVideo = !isImage && (f.type.startsWith('video/') || VIDEO_NAME.test(f.name));
      if (!isImage && !isVideo) {
        problems.push(f.name + ': not a PNG, JPEG, WebP or GIF image, nor a video (' + (f.type || 'unknown type') + ')');
        continue;
      }
      try {
        let url = await readFile(f);
        // a clip the browser has no type for (some .mkv) is sent as the server accepts it
        if (isVideo && !url.startsWith('data:video/'))
          url = 'data:application/octet-stream;base64,' + url.slice(url.indexOf(',') + 1);
        (isImage ? images : videos).push({ name: f.name, size: f.size, url });
      } catch (e) {
        problems.push(f.name + ': cannot be read (' + e.message + ')');
      }
    }
    showError($('images-error'), problems.join('\n'));
    renderMedia();
    changed();
  }

  function renderMedia() {
    for (const [list, ul, what] of [[images, $('images'), 'image'], [videos, $('videos'), 'video']]) {
      ul.textContent = '';
      list.forEach((m, i) => {
        const li = el('li');
        // images as thumbnails (data: is allowed for img-src); a video as a label: the page's
        // CSP has no media-src for data: URLs, and a name and a size say enough
        if (what === 'image' && m.url.startsWith('data:image/')) {
          const img = el('img');
          img.src = m.url;
          img.alt = m.name;
          li.appendChild(img);
        } else {
          li.appendChild(el('span', 'media-kind', what === 'video' ? '▶' : '?'));
        }
        const rm = el('button', 'remove-' + what, '×');
        rm.type = 'button';
        rm.setAttribute('aria-label', 'remove ' + m.name);
        rm.addEventListener('click', () => {
          list.splice(i, 1);
          renderMedia();
          changed();
        });
        li.append(el('span', 'caption', m.name + ' (' + kib(m.size) + ')'), rm);
        ul.appendChild(li);
      });
    }
  }

  // ---------------------------------------------------------------- the form as data

  // Everything the form holds, as plain data (saved in localStorage, and what presets and pasted
  // requests are turned into). Empty instructions/descriptions are null ("leave it out"/null)
  // unless a pasted request said "".
  function readForm() {
    return {
      kind: $('kind-json').checked ? 'json' : 'text',
      state: $('state').value,
      model: $('model').value,
      raw: $('raw').checked,
      questions: Array.from($('questions').children, (fs) => ({
        type: fs.dataset.type,
        id: fs.querySelector('.q-id').value,
        instructions: fieldValue(fs.querySelector('.q-instructions')),
        options: Array.from(fs.querySelectorAll('.option'), (row) => {
          const oid = row.querySelector('.o-id');
          return [oid ? oid.value : null, fieldValue(row.querySelector('.o-description'))];
        }),
      })),
      images: images.slice(),
      videos: videos.slice(),
      extra: extra.slice(),
    };
  }

  function writeForm(f) {
    $(f.kind === 'json' ? 'kind-json' : 'kind-text').checked = true;
    $('state').value = f.state;
    $('state').classList.toggle('mono', f.kind === 'json');
    if (typeof f.model === 'string') $('model').value = f.model;
    $('raw').checked = !!f.raw;
    $('questions').textContent = '';
    for (const q of f.questions) if (TYPE_LABEL[q.type]) addQuestion(q.type, q.id, q.instructions, q.options);
    images.splice(0, images.length, ...(f.images || []));
    videos.splice(0, videos.length, ...(f.videos || []));
    extra = (f.extra || []).slice();
    showError($('images-error'), '');
    renderMedia();
    renderExtra();
    clearMarks();
  }

  function renderExtra() {
    const p = $('extra-keys');
    p.textContent = '';
    p.hidden = !extra.length;
    if (!extra.length) return;
    p.append('Also sent as pasted: ' + extra.map(([k]) => J(k)).join(', ') + ' ');
    const b = el('button', 'drop-extra', 'leave them out');
    b.type = 'button';
    b.addEventListener('click', () => {
      extra = [];
      renderExtra();
      changed();
    });
    p.appendChild(b);
  }

  // A pasted request (JSON text) as form data; refuses, naming the place, what the form cannot
  // hold, so that what Decide sends is what was pasted.
  function fromRequest(text) {
    let root;
    try {
      root = parseOrdered(text);
    } catch (e) {
      throw new UserError('The request is not valid JSON: ' + e.message);
    }
    if (root.t !== 'obj')
      throw new UserError('A request is a JSON object ({"model": …, "state": …, "questions": {…}}), not ' + kindOf(root) + '.');
    const f = { kind: 'text', state: '', model: $('model').value, raw: false, questions: [], images: [], videos: [], extra: [] };
    let sawState = false;
    let sawQuestions = false;
    for (const [key, v] of root.pairs) {
      if (key === 'model') {
        if (v.t !== 'str') throw new UserError('"model" is a string ("clef-flash"), not ' + kindOf(v) + '.');
        f.model = v.v;
      } else if (key === 'state') {
        sawState = true;
        f.kind = v.t === 'str' ? 'text' : 'json';
        f.state = v.t === 'str' ? v.v : pretty(v);
      } else if (key === 'questions') {
        if (v.t !== 'obj')
          throw new UserError('"questions" is an object of question id → question ({"hot": {"type": ' + J(TYPE_OF.flag) + '}}), not ' + kindOf(v) + '.');
        sawQuestions = true;
        f.questions = v.pairs.map(([id, q]) => questionFrom(id, q));
      } else if (key === 'images' || key === 'videos') {
        if (v.t !== 'arr' || !v.items.every((x) => x.t === 'str'))
          throw new UserError('"' + key + '" is a list of strings (data: URLs or base64), not ' + kindOf(v) + '.');
        f[key] = v.items.map((x, i) => ({
          name: 'pasted ' + key.slice(0, -1) + ' ' + (i + 1),
          size: x.v.startsWith('data:') ? Math.round(((x.v.length - x.v.indexOf(',') - 1) * 3) / 4) : x.v.length,
          url: x.v,
        }));
      } else if (key === 'raw' && v.t === 'lit' && v.raw === 'true') {
        f.raw = true;
      } else {
        f.extra.push([key, compact(v)]); // the form has no field for it: sent as it came
      }
    }
    if (!sawState) throw new UserError('The request has no "state" (the text or JSON the questions are about).');
    if (!sawQuestions) throw new UserError('The request has no "questions".');
    return f;
  }

  function questionFrom(id, q) {
    const at = 'questions.' + id;
    if (q.t !== 'obj') throw new UserError(at + ' is ' + kindOf(q) + '; a question is an object ({"type": ' + J(TYPE_OF.flag) + '}).');
    const get = (k) => q.pairs.filter(([key]) => key === k).map(([, v]) => v).pop();
    for (const [k] of q.pairs)
      if (!['type', 'instructions', 'criteria'].includes(k))
        throw new UserError(at + ': unknown key ' + J(k) + ' (a question has "type", "instructions" and "criteria").');
    const type = get('type');
    if (!type || type.t !== 'str' || !TYPE_LABEL[type.v])
      throw new UserError(at + '.type must be ' + TYPES.map((t) => J(t.name)).join(', ').replace(/, ([^,]*)$/, ' or $1') +
        (type ? ', not ' + compact(type) : '') + '.');
    const ins = get('instructions');
    if (ins && ins.t !== 'str') throw new UserError(at + '.instructions: the form holds text, not ' + kindOf(ins) + '.');
    const crit = get('criteria');
    const desc = (n, where) => {
      if (n.t === 'str') return n.v;
      if (n.t === 'lit' && n.raw === 'null') return null;
      throw new UserError(at + '.criteria' + where + ': the form holds a text description or null, not ' + kindOf(n) + '.');
    };
    let options = [];
    if (SHAPE[type.v] === 'flag') {
      if (crit) throw new UserError(at + ': a ' + type.v + ' question has no "criteria".');
    } else if (SHAPE[type.v] === 'keyed') {
      if (!crit || crit.t !== 'obj')
        throw new UserError(at + '.criteria: a ' + type.v + ' question needs an object of option id → description.');
      options = crit.pairs.map(([oid, d]) => [oid, desc(d, '.' + oid)]);
    } else {
      if (!crit || crit.t !== 'arr')
        throw new UserError(at + '.criteria: a ' + type.v + ' question needs a list of level descriptions.');
      options = crit.items.map((d, i) => [null, desc(d, '[' + i + ']')]);
    }
    return { type: type.v, id, instructions: ins ? ins.v : null, options };
  }

  // ---------------------------------------------------------------- the request

  // The body is written as text, not through JSON.stringify of an object: JavaScript objects put
  // integer-like keys ("1", "2") first, and the order of questions and options matters (answers
  // come back in request order; a choice tie goes to the first option). The JSON state is sent as
  // typed (checked with JSON.parse first), so large integers and the like arrive intact.
  function buildRequest() {
    const f = readForm();
    let state;
    if (f.kind === 'json') {
      if (!f.state.trim()) throw new UserError('State: JSON mode needs a JSON value (or switch to text).', $('state'));
      try {
        JSON.parse(f.state);
      } catch (e) {
        throw new UserError('State is not valid JSON: ' + e.message, $('state'));
      }
      state = f.state.trim();
    } else {
      state = J(f.state);
    }
    const questions = [];
    const parts = [];
    const seen = new Set();
    const fieldsets = $('questions').children;
    const desc = (d) => (d === null ? 'null' : J(d));
    f.questions.forEach((q, qi) => {
      const fs = fieldsets[qi];
      const { type, id } = q;
      if (id === '') throw new UserError('A ' + TYPE_LABEL[type] + ' question has no id.', fs.querySelector('.q-id'));
      if (seen.has(id)) throw new UserError('Two questions have the id "' + id + '".', fs.querySelector('.q-id'));
      seen.add(id);
      const name = 'Question "' + id + '"';
      let body = '{"type":' + J(type);
      if (q.instructions !== null) body += ',"instructions":' + J(q.instructions);
      const options = [];
      if (SHAPE[type] === 'keyed') {
        if (!q.options.length) throw new UserError(name + ' needs at least one option.', fs.querySelector('.add-option'));
        const crit = q.options.map(([oid, d], i) => {
          const input = fs.querySelectorAll('.o-id')[i];
          if (oid === '') throw new UserError(name + ': option ' + (i + 1) + ' has no id.', input);
          if (options.includes(oid)) throw new UserError(name + ': two options have the id "' + oid + '".', input);
          options.push(oid);
          return J(oid) + ':' + desc(d);
        });
        body += ',"criteria":{' + crit.join(',') + '}';
      } else if (SHAPE[type] === 'levels') {
        if (!q.options.length) throw new UserError(name + ' needs at least one level.', fs.querySelector('.add-option'));
        q.options.forEach((o, i) => options.push(String(i)));
        body += ',"criteria":[' + q.options.map(([, d]) => desc(d)).join(',') + ']';
      } else {
        options.push('true');
      }
      parts.push(J(id) + ':' + body + '}');
      questions.push({ id, type, options });
    });
    if (!parts.length) throw new UserError('Add at least one question.', $('add-' + TYPES[0].name));
    let body = '{"model":' + J(f.model) + ',"state":' + state + ',"questions":{' + parts.join(',') + '}';
    if (images.length) body += ',"images":[' + images.map((m) => J(m.url)).join(',') + ']';
    if (videos.length) body += ',"videos":[' + videos.map((m) => J(m.url)).join(',') + ']';
    if (f.raw) body += ',"raw":true';
    for (const [k, raw] of extra) if (!(k === 'raw' && f.raw)) body += ',' + J(k) + ':' + raw;
    body += '}';
    return { body, questions };
  }

  const shellQuote = (s) => "'" + s.replace(/'/g, "'\\''") + "'";

  function curlOf(body) {
    let c = 'curl -s ' + shellQuote(location.origin + '/v1/systemone') + " -H 'Content-Type: application/json'";
    if ($('api-key').value) c += ' -H "Authorization: Bearer $CLEF_API_KEY"';
    return c + ' --data-binary ' + shellQuote(body);
  }

  // ---------------------------------------------------------------- the JSON panel

  // The panel shows the form's request (kept up to date while it is open and not being edited);
  // pasting a whole request into it, or "fill the form", puts that request into the form.
  function refreshJson() {
    if (jsonDirty || !$('json-panel').open) return;
    try {
      $('request-json').value = pretty(parseOrdered(buildRequest().body));
      showError($('json-error'), '');
    } catch (e) {
      if (!(e instanceof UserError)) throw e;
      showError($('json-error'), 'The form is not a complete request yet: ' + e.message);
    }
  }

  function applyJson() {
    const f = fromRequest($('request-json').value);
    writeForm(f);
    jsonDirty = false;
    showError($('json-error'), '');
    $('json-note').textContent = 'the form now holds this request';
    setTimeout(() => { $('json-note').textContent = ''; }, 2500);
    changed();
  }

  function tryApplyJson() {
    try {
      applyJson();
      return true;
    } catch (e) {
      if (!(e instanceof UserError)) throw e;
      showError($('json-error'), e.message);
      return false;
    }
  }

  // ---------------------------------------------------------------- kept across reloads

  let saveTimer = 0;
  // The form changed (an edit, a button, a preset, a pasted request): keep it, and show it in the
  // JSON panel (the form wins over unapplied edits there).
  // Both wait for a pause in typing: with a video in the form each is a pass over megabytes.
  function changed() {
    jsonDirty = false;
    clearTimeout(saveTimer);
    saveTimer = setTimeout(() => {
      save();
      refreshJson();
    }, 200);
  }

  function save() {
    const f = readForm();
    let note = '';
    try {
      localStorage.setItem(SAVE_KEY, JSON.stringify(f));
    } catch (e) {
      // over the storage quota (large media): keep the rest
      try {
        localStorage.setItem(SAVE_KEY, JSON.stringify(Object.assign(f, { images: [], videos: [] })));
        note = 'images and videos are too large to keep across reloads';
      } catch (e2) {
        note = 'the form cannot be kept across reloads (' + e2.message + ')';
      }
    }
    $('saved-note').textContent = note;
  }

  function restore() {
    let f = null;
    try {
      f = JSON.parse(localStorage.getItem(SAVE_KEY) || 'null');
    } catch (e) {
      f = null;
    }
    try {
      $('api-key').value = sessionStorage.getItem(KEY_KEY) || '';
    } catch (e) {
      /* storage off: nothing kept */
    }
    if (!f || !Array.isArray(f.questions)) return false;
    writeForm(f);
    return true;
  }

  // ---------------------------------------------------------------- presets

  // A small picture drawn here (a house under the sun): the image example needs no file and
  // fetches nothing.
  function sceneImage() {
    const c = document.createElement('canvas');
    c.width = 96;
    c.height = 64;
    const g = c.getContext('2d');
    g.fillStyle = '#8fd0f5';
    g.fillRect(0, 0, 96, 44);
    g.fillStyle = '#4c9a3f';
    g.fillRect(0, 44, 96, 20);
    g.fillStyle = '#ffd23f';
    g.beginPath();
    g.arc(76, 14, 9, 0, 2 * Math.PI);
    g.fill();
    g.fillStyle = '#c8553d';
    g.fillRect(16, 30, 30, 20);
    g.fillStyle = '#6b3e26';
    g.beginPath();
    g.moveTo(12, 31);
    g.lineTo(31, 16);
    g.lineTo(50, 31);
    g.fill();
    g.fillStyle = '#3d2a1e';
    g.fillRect(27, 38, 8, 12);
    return c.toDataURL('image/png');
  }

  // Each example is a request; JSON.stringify keeps these keys' order (none is integer-like).
  const PRESETS = {
    ticket: () => ({
      state: 'Subject: Charged twice for my March invoice\n\nHello, my card was charged twice (2 x 49.00 EUR) for ' +
        'invoice INV-2291. This is the third time I write about it. Please refund the second charge today, ' +
        'otherwise I will cancel my subscription.\n\nMaria',
      questions: {
        category: { type: TYPE_OF.keyed, instructions: 'What is the ticket about?',
          criteria: { billing: 'Payments, invoices, refunds', technical: 'Something does not work',
            account: 'Login, profile, cancellation', other: null } },
        urgency: { type: TYPE_OF.levels, instructions: 'How urgent is it?', criteria: ['can wait', 'today', 'right now'] },
        refund: { type: TYPE_OF.flag, instructions: 'Does the customer ask for a refund?' },
      },
    }),
    record: () => ({
      state: { order_id: 48213, customer: { name: 'Jan Novak', since: '2019-04-02', orders: 37 },
        items: [{ sku: 'KTL-200', name: 'Electric kettle', qty: 1, price: 39.9 },
          { sku: 'MUG-12', name: 'Mug', qty: 6, price: 7.5 }],
        total: 84.9, currency: 'EUR', shipping: { country: 'CZ', express: true },
        payment: { method: 'card', attempts: 3 } },
      questions: {
        fraud_risk: { type: TYPE_OF.keyed, instructions: 'How risky is this order?',
          criteria: { low: null, medium: null, high: 'Hold it for a manual check' } },
        express: { type: TYPE_OF.flag, instructions: 'Was express shipping requested?' },
      },
    }),
    image: () => ({
      state: 'A photo sent by a customer.',
      questions: {
        outdoors: { type: TYPE_OF.flag, instructions: 'Is the picture taken outdoors?' },
        time_of_day: { type: TYPE_OF.keyed, criteria: { day: 'The sun is up', night: 'It is dark' } },
      },
      images: [sceneImage()],
    }),
  };

  function applyPreset(name) {
    const f = fromRequest(JSON.stringify(PRESETS[name]()));
    f.images.forEach((m) => { m.name = name + ' example.png'; });
    writeForm(f);
    jsonDirty = false;
    clearProblem();
    changed();
  }

  // ---------------------------------------------------------------- the answers

  function barRow(option, label, p, chosen) {
    const row = el('div', 'bar-row' + (chosen ? ' chosen' : ''));
    row.dataset.option = option;
    const track = el('span', 'track');
    const fill = el('span', 'fill');
    // CSSOM, not a style attribute: the Content-Security-Policy allows this
    fill.style.width = typeof p === 'number' ? Math.max(0, Math.min(1, p)) * 100 + '%' : '0';
    track.appendChild(fill);
    row.append(el('span', 'label', label), track, el('span', 'num', pyNum(p)));
    row.title = label + ': ' + pyNum(p);
    return row;
  }

  function summaryItem(key, label, value) {
    const s = el('span', 'item');
    const v = el('b', 'value', typeof value === 'number' ? pyNum(value) : String(value));
    v.dataset.key = key;
    s.append(label + ' ', v);
    return s;
  }

  function renderAnswers(obj, questions) {
    const box = $('answers');
    box.textContent = '';
    const answers = obj.answers || {};
    for (const q of questions) {
      const a = answers[q.id];
      if (!a) continue;
      const div = el('div', 'answer');
      div.dataset.question = q.id;
      div.dataset.type = a.type;
      const h = el('h3');
      h.append(el('span', 'qid', q.id), el('span', 'tag', TYPE_LABEL[a.type] || a.type));
      const sum = el('p', 'summary');
      div.append(h, sum);
      const value = a[a.type]; // an answer's value is under its type's name
      if (SHAPE[a.type] === 'flag') {
        sum.append(summaryItem('answer', 'answer', value >= 0.5 ? 'yes' : 'no'));
        div.appendChild(barRow('true', 'p(yes)', value, false));
      } else if (SHAPE[a.type] === 'keyed') {
        sum.append(summaryItem(a.type, a.type, value), summaryItem('confidence', 'confidence', a.confidence));
        const probs = a.probabilities || {};
        for (const o of q.options) if (o in probs) div.appendChild(barRow(o, o, probs[o], o === value));
      } else if (SHAPE[a.type] === 'levels') {
        sum.append(summaryItem(a.type, 'expected level', value), summaryItem('confidence', 'confidence', a.confidence));
        const probs = a.probabilities || {};
        const legend = a.legend || {};
        for (const o of q.options) {
          if (!(o in probs)) continue;
          const d = legend[o];
          const label = d === null || d === undefined ? o : o + ' · ' + (typeof d === 'string' ? d : JSON.stringify(d));
          div.appendChild(barRow(o, label, probs[o], false));
        }
      }
      box.appendChild(div);
    }
    if (obj.usage) box.appendChild(el('p', 'muted usage', 'input tokens: ' + obj.usage.input_tokens));
  }

  // ---------------------------------------------------------------- problems

  function clearMarks() {
    document.querySelectorAll('.invalid').forEach((e) => {
      e.classList.remove('invalid');
      e.removeAttribute('aria-invalid');
    });
    document.querySelectorAll('#form .field-note').forEach((e) => e.remove());
  }

  function clearProblem() {
    showProblem(null);
  }

  // The error panel: a title (HTTP status and error type, or what went wrong on the page), the
  // message, and what to do next; the field at fault, if any, is marked and focused. The Answers
  // heading is hidden while a problem is shown.
  function showProblem(p) {
    const box = $('error');
    box.textContent = '';
    box.hidden = !p;
    $('answers-heading').hidden = !!p;
    clearMarks();
    if (!p) return;
    $('placeholder').hidden = true;
    box.append(el('strong', 'problem-title', p.title));
    if (p.message) box.append(el('p', 'problem-message', p.message));
    if (p.hint) box.append(el('p', 'problem-hint', p.hint));
    if (p.field) {
      // the field at fault, marked, with the message beside it (on a phone the panel is further down)
      const d = p.field.closest('details');
      if (d) d.open = true;
      p.field.classList.add('invalid');
      p.field.setAttribute('aria-invalid', 'true');
      const note = el('p', 'field-note', p.fieldNote || p.message || p.title);
      note.setAttribute('role', 'alert');
      (p.field.closest('.option, label') || p.field).after(note);
      p.field.focus();
    } else {
      reveal(box);
    }
  }

  const HINTS = {
    413: 'The request is larger than the server accepts (clef serve --max-body, default 16M): use smaller images or videos.',
    429: 'The server is busy: try again in a moment.',
    503: 'The server is busy or still loading the model: try again in a moment.',
  };

  function problemOf(resp, obj, text) {
    const head = 'HTTP ' + resp.status;
    const e = obj && obj.error && typeof obj.error === 'object' ? obj.error : null;
    if (resp.status === 401) {
      const had = !!$('api-key').value;
      return {
        fieldNote: had ? 'The server refused this key: check it, then press Decide.'
          : 'This server needs an API key: enter it here, then press Decide.',
        title: head + ' — ' + ((e && e.type) || 'Unauthorized') + ': ' + (had ? 'the server refused this API key' : 'this server needs an API key'),
        message: e && e.message,
        hint: (had ? 'Check the key in the API key field (under Options)' : 'Enter the key in the API key field (under Options)') +
          ' — the one given to clef serve --api-key — and press Decide again.',
        field: $('api-key'),
      };
    }
    if (e) return { title: head + ' — ' + (e.type || 'error'), message: e.message || '(no message)', hint: HINTS[resp.status] };
    if (resp.ok) return { title: head + ' — the response is not the JSON answer expected', hint: 'See the raw response below.' };
    return { title: head + (resp.statusText ? ' ' + resp.statusText : ''), message: text.slice(0, 300), hint: HINTS[resp.status] };
  }

  // Brings an element of the result into view when it is not (the narrow, one-column layout).
  function reveal(elem) {
    const r = elem.getBoundingClientRect();
    if (r.top < 0 || r.bottom > window.innerHeight) {
      $('result').scrollTop = 0;
      $('result').scrollIntoView({ block: 'start' });
    }
  }

  // ---------------------------------------------------------------- submit

  async function submit(ev) {
    if (ev) ev.preventDefault();
    if (busy) return;
    clearProblem();
    if (jsonDirty && !tryApplyJson()) {
      showProblem({ title: 'Not sent: the request JSON above does not fit the form', message: $('json-error').textContent,
        field: $('request-json') });
      return;
    }
    let req;
    try {
      req = buildRequest();
    } catch (e) {
      if (!(e instanceof UserError)) throw e;
      showProblem({ title: 'Not sent', message: e.message, field: e.field });
      return;
    }
    save();
    $('placeholder').hidden = true;
    $('curl').textContent = curlOf(req.body);
    $('raw-response').textContent = '';
    $('answers').textContent = '';
    $('result').scrollTop = 0; // the new answers start at the top of their column
    busy = true;
    $('submit').disabled = true;
    $('status').textContent = 'waiting for the model…';
    reveal($('result'));
    const headers = { 'Content-Type': 'application/json' };
    if ($('api-key').value) headers.Authorization = 'Bearer ' + $('api-key').value;
    const t0 = performance.now();
    try {
      let resp, text;
      try {
        resp = await fetch('/v1/systemone', { method: 'POST', headers, body: req.body });
        text = await resp.text();
      } catch (e) {
        $('status').textContent = '';
        const mb = req.body.length / 1048576;
        showProblem({ title: 'No answer from the server', message: e.message, hint: mb >= 1
          ? 'The request is ' + mb.toFixed(1) + ' MB: over the server\'s --max-body (default 16M) the server ' +
            'answers 413 and closes the connection, which a browser may see as this.'
          : 'Is clef serve still running?' });
        return;
      }
      const ms = Math.round(performance.now() - t0);
      const rid = resp.headers.get('X-Request-Id');
      $('status').textContent = 'HTTP ' + resp.status + ' · ' + ms + ' ms' + (rid ? ' · request id ' + rid : '');
      $('raw-response').textContent = text;
      let obj = null;
      try {
        obj = JSON.parse(text);
      } catch (e) {
        obj = null;
      }
      if (!resp.ok || !obj || typeof obj !== 'object' || obj.error || !obj.answers) {
        showProblem(problemOf(resp, obj, text));
        return;
      }
      if (resp.status === 200 && $('api-key').value) serverInfo(); // the key works: say so in the header
      renderAnswers(obj, req.questions);
      const first = $('answers').firstElementChild;
      if (first) reveal(first);
      $('answers').dataset.done = String(Date.now());
    } finally {
      busy = false;
      $('submit').disabled = false;
    }
  }

  let gotModel = false;
  async function serverInfo(firstVisit) {
    try {
      const headers = {};
      if ($('api-key').value) headers.Authorization = 'Bearer ' + $('api-key').value;
      const r = await fetch('/v1/models', { headers });
      if (r.status === 401) {
        $('server').textContent = 'needs an API key (Options)';
        return;
      }
      const m = await r.json();
      const d = m && m.data && m.data[0];
      if (!d) throw new Error('no model listed');
      $('server').textContent = d.id + (d.ready ? ' · ready' : ' · loading');
      if (d.id && firstVisit && !gotModel) {
        $('model').value = d.id;
        changed();
      }
      gotModel = true;
    } catch (e) {
      $('server').textContent = 'server info unavailable';
    }
  }

  // ---------------------------------------------------------------- wiring

  function init() {
    const form = $('form');
    form.addEventListener('submit', submit);
    // any edit: unmark the field, keep the form (the JSON panel's own edits wait for "fill the form")
    const edited = (e) => {
      const t = e.target;
      if (t.id === 'request-json') {
        jsonDirty = true;
        return;
      }
      if (t.dataset && e.type === 'input') delete t.dataset.empty;
      if (t.classList && t.classList.contains('invalid')) clearMarks(); // the field and its note
      if (t.id === 'api-key') {
        try {
          sessionStorage.setItem(KEY_KEY, t.value);
        } catch (err) {
          /* storage off */
        }
        return;
      }
      if (t.id !== 'file') changed();
    };
    form.addEventListener('input', edited);
    form.addEventListener('change', edited);
    form.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        form.requestSubmit();
      }
    });
    for (const t of TYPES) { // one button per question type: #add-<name>
      const b = el('button', '', '+ ' + t.label);
      b.type = 'button';
      b.id = 'add-' + t.name;
      b.addEventListener('click', () => {
        addQuestion(t.name, undefined, null, NEW_OPTIONS[t.shape]).querySelector('.q-id').focus();
        changed();
      });
      $('add-question').appendChild(b);
    }
    $('request-json').placeholder = '{"model": "clef-flash", "state": "…", "questions": {"hot": {"type": ' + J(TYPE_OF.flag) + '}}}';
    const syncKind = () => $('state').classList.toggle('mono', $('kind-json').checked);
    $('kind-text').addEventListener('change', syncKind);
    $('kind-json').addEventListener('change', syncKind);
    document.querySelectorAll('.preset').forEach((b) => b.addEventListener('click', () => applyPreset(b.dataset.preset)));

    $('file').addEventListener('change', async (e) => {
      await addFiles(e.target.files);
      e.target.value = '';
    });
    const drop = $('drop');
    drop.addEventListener('dragover', (e) => {
      e.preventDefault();
      drop.classList.add('over');
    });
    drop.addEventListener('dragleave', () => drop.classList.remove('over'));
    drop.addEventListener('drop', (e) => {
      e.preventDefault();
      drop.classList.remove('over');
      addFiles(e.dataTransfer.files);
    });
    // a file dropped beside the zone must not replace the page
    window.addEventListener('dragover', (e) => e.preventDefault());
    window.addEventListener('drop', (e) => e.preventDefault());

    // the JSON panel
    $('json-panel').addEventListener('toggle', refreshJson);
    $('json-apply').addEventListener('click', tryApplyJson);
    const ta = $('request-json');
    ta.addEventListener('paste', (e) => {
      // a whole request pasted over the panel's text (empty or all selected) fills the form at once
      const text = e.clipboardData && e.clipboardData.getData('text/plain');
      const whole = ta.value.trim() === '' || (ta.selectionStart === 0 && ta.selectionEnd === ta.value.length);
      if (!text || !whole) return;
      e.preventDefault();
      ta.value = text;
      jsonDirty = true;
      tryApplyJson();
    });
    // a request pasted anywhere outside a field: open the panel with it
    document.addEventListener('paste', (e) => {
      const t = e.target;
      if (t.closest && t.closest('input, textarea, [contenteditable]')) return;
      const text = e.clipboardData && e.clipboardData.getData('text/plain');
      if (!text || !/^\s*\{/.test(text)) return;
      e.preventDefault();
      $('json-panel').open = true;
      ta.value = text;
      jsonDirty = true;
      tryApplyJson();
    });
    copyButton($('json-copy'), () => ta.value, ta);
    window.addEventListener('pagehide', save); // an edit within the save delay survives a reload
    copyButton($('copy-curl'), () => $('curl').textContent, $('curl'));

    const restored = restore();
    if (!restored) addQuestion(TYPE_OF.flag, 'hot', 'Is the water hot?');
    serverInfo(!restored);
  }

  function copyButton(button, text, node) {
    const label = button.textContent;
    button.addEventListener('click', async () => {
      if (node.id === 'request-json') refreshJson();
      try {
        await navigator.clipboard.writeText(text());
        button.textContent = 'copied';
      } catch (e) { // no clipboard (a page served over plain HTTP to another host): select it
        if (node.select) {
          node.focus();
          node.select();
        } else {
          const range = document.createRange();
          range.selectNodeContents(node);
          const sel = window.getSelection();
          sel.removeAllRanges();
          sel.addRange(range);
        }
        button.textContent = 'selected: press Ctrl+C';
      }
      setTimeout(() => { button.textContent = label; }, 2000);
    });
  }

  init();
})();
