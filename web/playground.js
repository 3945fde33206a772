// The clef playground (docs/serving.md, "The playground"): builds a SystemOne request from the
// form, POSTs it to /v1/systemone on the server that served this page, and shows the answers as
// bars with the response's own numbers, the request as a curl command and the raw response.
// No library, no build step, nothing fetched from anywhere but this server.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const TYPE_LABEL = { noul: 'yes/no (noul)', choice: 'choice', score: 'score' };
  const IMAGE_TYPES = /^image\/(png|jpeg|webp|gif)$/;
  const images = []; // {name, size, url} in the order they were added
  let busy = false;

  class UserError extends Error {}

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

  // ---------------------------------------------------------------- questions

  function uniqueId(type) {
    const used = new Set(Array.from(document.querySelectorAll('#questions .q-id'), (i) => i.value));
    for (let n = 1; ; n++) if (!used.has(type + n)) return type + n;
  }

  function renumber(fs) {
    fs.querySelectorAll('.option').forEach((row, i) => {
      row.querySelector('.o-level').textContent = fs.dataset.type === 'score' ? String(i) : '';
    });
  }

  function addOption(fs, id, description) {
    const row = $('option-template').content.firstElementChild.cloneNode(true);
    const idInput = row.querySelector('.o-id');
    if (fs.dataset.type === 'score') idInput.remove();
    else idInput.value = id || '';
    const d = row.querySelector('.o-description');
    d.value = description || '';
    if (fs.dataset.type === 'score') d.setAttribute('aria-label', 'level description');
    row.querySelector('.remove-option').addEventListener('click', () => {
      row.remove();
      renumber(fs);
    });
    fs.querySelector('.options').appendChild(row);
    renumber(fs);
    return row;
  }

  function addQuestion(type, id, instructions, options) {
    const fs = $('question-template').content.firstElementChild.cloneNode(true);
    fs.dataset.type = type;
    fs.querySelector('.q-type').textContent = TYPE_LABEL[type];
    fs.querySelector('.q-id').value = id || uniqueId(type);
    fs.querySelector('.q-instructions').value = instructions || '';
    const add = fs.querySelector('.add-option');
    if (type === 'noul') {
      add.remove();
    } else {
      add.textContent = type === 'choice' ? '+ option' : '+ level';
      add.addEventListener('click', () => addOption(fs, '', '').querySelector('input').focus());
    }
    fs.querySelector('.remove-question').addEventListener('click', () => fs.remove());
    $('questions').appendChild(fs);
    for (const [oid, desc] of options || []) addOption(fs, oid, desc);
    return fs;
  }

  // ---------------------------------------------------------------- images

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
      if (!IMAGE_TYPES.test(f.type)) {
        problems.push(f.name + ': not a PNG, JPEG, WebP or GIF image (' + (f.type || 'unknown type') + ')');
        continue;
      }
      try {
        images.push({ name: f.name, size: f.size, url: await readFile(f) });
      } catch (e) {
        problems.push(f.name + ': cannot be read (' + e.message + ')');
      }
    }
    showError($('images-error'), problems.join('\n'));
    renderImages();
  }

  function renderImages() {
    const ul = $('images');
    ul.textContent = '';
    images.forEach((im, i) => {
      const li = el('li');
      const img = el('img');
      img.src = im.url;
      img.alt = im.name;
      const cap = el('span', 'caption', im.name + ' (' + Math.ceil(im.size / 1024) + ' KiB)');
      const rm = el('button', 'remove-image', '×');
      rm.type = 'button';
      rm.setAttribute('aria-label', 'remove ' + im.name);
      rm.addEventListener('click', () => {
        images.splice(i, 1);
        renderImages();
      });
      li.append(img, cap, rm);
      ul.appendChild(li);
    });
  }

  // ---------------------------------------------------------------- the request

  // The body is written as text, not through JSON.stringify of an object: JavaScript objects put
  // integer-like keys ("1", "2") first, and the order of questions and options matters (answers
  // come back in request order; a choice tie goes to the first option). The JSON state is sent as
  // typed (checked with JSON.parse first), so large integers and the like arrive intact.
  function buildRequest() {
    const text = $('state').value;
    let state;
    if ($('kind-json').checked) {
      if (!text.trim()) throw new UserError('State: JSON mode needs a JSON value (or switch to text).');
      try {
        JSON.parse(text);
      } catch (e) {
        throw new UserError('State is not valid JSON: ' + e.message);
      }
      state = text.trim();
    } else {
      state = J(text);
    }
    const questions = [];
    const parts = [];
    const seen = new Set();
    const desc = (row) => {
      const d = row.querySelector('.o-description').value;
      return d === '' ? 'null' : J(d);
    };
    for (const fs of $('questions').children) {
      const type = fs.dataset.type;
      const id = fs.querySelector('.q-id').value;
      if (id === '') throw new UserError('A ' + TYPE_LABEL[type] + ' question has no id.');
      if (seen.has(id)) throw new UserError('Two questions have the id "' + id + '".');
      seen.add(id);
      const name = 'Question "' + id + '"';
      let q = '{"type":' + J(type);
      const instructions = fs.querySelector('.q-instructions').value;
      if (instructions !== '') q += ',"instructions":' + J(instructions);
      const rows = Array.from(fs.querySelectorAll('.option'));
      const options = [];
      if (type === 'choice') {
        if (!rows.length) throw new UserError(name + ' needs at least one option.');
        const crit = rows.map((row, i) => {
          const oid = row.querySelector('.o-id').value;
          if (oid === '') throw new UserError(name + ': option ' + (i + 1) + ' has no id.');
          if (options.includes(oid)) throw new UserError(name + ': two options have the id "' + oid + '".');
          options.push(oid);
          return J(oid) + ':' + desc(row);
        });
        q += ',"criteria":{' + crit.join(',') + '}';
      } else if (type === 'score') {
        if (!rows.length) throw new UserError(name + ' needs at least one level.');
        rows.forEach((row, i) => options.push(String(i)));
        q += ',"criteria":[' + rows.map(desc).join(',') + ']';
      } else {
        options.push('true');
      }
      parts.push(J(id) + ':' + q + '}');
      questions.push({ id, type, options });
    }
    if (!parts.length) throw new UserError('Add at least one question.');
    let body = '{"model":' + J($('model').value) + ',"state":' + state + ',"questions":{' + parts.join(',') + '}';
    if (images.length) body += ',"images":[' + images.map((im) => J(im.url)).join(',') + ']';
    if ($('raw').checked) body += ',"raw":true';
    body += '}';
    return { body, questions };
  }

  const shellQuote = (s) => "'" + s.replace(/'/g, "'\\''") + "'";

  function curlOf(body) {
    let c = 'curl -s ' + shellQuote(location.origin + '/v1/systemone') + " -H 'Content-Type: application/json'";
    if ($('api-key').value) c += ' -H "Authorization: Bearer $CLEF_API_KEY"';
    return c + ' --data-binary ' + shellQuote(body);
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
      if (a.type === 'noul') {
        sum.append(summaryItem('answer', 'answer', a.noul >= 0.5 ? 'yes' : 'no'));
        div.appendChild(barRow('true', 'p(yes)', a.noul, false));
      } else if (a.type === 'choice') {
        sum.append(summaryItem('choice', 'choice', a.choice), summaryItem('confidence', 'confidence', a.confidence));
        const probs = a.probabilities || {};
        for (const o of q.options) if (o in probs) div.appendChild(barRow(o, o, probs[o], o === a.choice));
      } else if (a.type === 'score') {
        sum.append(summaryItem('score', 'expected level', a.score), summaryItem('confidence', 'confidence', a.confidence));
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

  function describeError(resp, obj, text) {
    const head = 'HTTP ' + resp.status + (resp.statusText ? ' ' + resp.statusText : '');
    if (obj && obj.error && typeof obj.error === 'object')
      return head + ' — ' + (obj.error.type || 'error') + ': ' + (obj.error.message || '(no message)');
    if (resp.ok) return head + ' — the response is not the JSON answer expected (see the raw response below).';
    return head + (text ? ' — ' + text.slice(0, 300) : '');
  }

  // ---------------------------------------------------------------- submit

  async function submit(ev) {
    ev.preventDefault();
    if (busy) return;
    showError($('error'), '');
    let req;
    try {
      req = buildRequest();
    } catch (e) {
      if (!(e instanceof UserError)) throw e;
      showError($('error'), e.message);
      return;
    }
    $('result').hidden = false;
    $('curl').textContent = curlOf(req.body);
    $('raw-response').textContent = '';
    $('answers').textContent = '';
    busy = true;
    $('submit').disabled = true;
    $('status').textContent = 'waiting for the model…';
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
        showError($('error'), 'Could not reach the server (' + e.message + ').' + (mb >= 1
          ? ' The request is ' + mb.toFixed(1) + ' MB: over the server\'s --max-body (default 16M) the server ' +
            'answers 413 and closes the connection, which a browser may see as this.'
          : ''));
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
        showError($('error'), describeError(resp, obj, text));
        return;
      }
      renderAnswers(obj, req.questions);
      $('answers').dataset.done = String(Date.now());
    } finally {
      busy = false;
      $('submit').disabled = false;
    }
  }

  async function serverInfo() {
    try {
      const r = await fetch('/v1/models');
      const m = await r.json();
      const d = m && m.data && m.data[0];
      if (!d) throw new Error('no model listed');
      $('server').textContent = d.id + (d.ready ? ' · ready' : ' · loading');
      if (d.id) $('model').value = d.id;
    } catch (e) {
      $('server').textContent = 'server info unavailable';
    }
  }

  // ---------------------------------------------------------------- wiring

  function init() {
    $('form').addEventListener('submit', submit);
    $('add-noul').addEventListener('click', () => addQuestion('noul').querySelector('.q-id').focus());
    $('add-choice').addEventListener('click', () =>
      addQuestion('choice', '', '', [['', ''], ['', '']]).querySelector('.q-id').focus());
    $('add-score').addEventListener('click', () =>
      addQuestion('score', '', '', [['', 'low'], ['', 'medium'], ['', 'high']]).querySelector('.q-id').focus());
    $('state').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) $('form').requestSubmit();
    });
    const syncKind = () => {
      $('state').classList.toggle('mono', $('kind-json').checked);
    };
    $('kind-text').addEventListener('change', syncKind);
    $('kind-json').addEventListener('change', syncKind);

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

    $('copy-curl').addEventListener('click', async () => {
      const text = $('curl').textContent;
      try {
        await navigator.clipboard.writeText(text);
        $('copy-curl').textContent = 'copied';
      } catch (e) { // no clipboard (a page served over plain HTTP to another host): select it
        const range = document.createRange();
        range.selectNodeContents($('curl'));
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        $('copy-curl').textContent = 'selected: press Ctrl+C';
      }
      setTimeout(() => { $('copy-curl').textContent = 'copy'; }, 2000);
    });

    addQuestion('noul', 'hot', 'Is the water hot?');
    serverInfo();
  }

  init();
})();
