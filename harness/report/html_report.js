(function () {
  'use strict';
  var errors = document.getElementById('js-errors');
  window.onerror = function (message, source, line, column) {
    if (errors) errors.appendChild(document.createTextNode('JavaScript error: ' + message + ' (line ' + line + ':' + column + ')\n'));
    return false;
  };
  function all(selector) { return Array.prototype.slice.call(document.querySelectorAll(selector)); }

  var form = document.getElementById('filters');
  var onlyMissed = document.getElementById('only-missed');
  var tag = document.getElementById('tag');
  var shown = document.getElementById('shown');
  function applyFilters() {
    var statuses = {};
    all('#filters input[name=status]').forEach(function (box) { statuses[box.value] = box.checked; });
    var wantTag = tag ? tag.value : '';
    var wantMissed = onlyMissed ? onlyMissed.checked : false;
    var visible = 0, total = 0;
    all('[data-status]').forEach(function (el) {
      var ok = statuses[el.getAttribute('data-status')] !== false &&
               (!wantMissed || el.getAttribute('data-met') === '0') &&
               (!wantTag || (el.getAttribute('data-tags') || '').indexOf(' ' + wantTag + ' ') >= 0);
      el.hidden = !ok;
      if (el.classList.contains('case')) { total++; if (ok) visible++; }
    });
    if (shown) shown.textContent = visible + ' of ' + total + ' cases shown';
  }
  if (form) {
    form.hidden = false;
    form.addEventListener('change', applyFilters);
    // Everything starts shown: count instead of touching every element of a 1,000-case page.
    if (shown) {
      var total = document.querySelectorAll('details.case').length;
      shown.textContent = total + ' of ' + total + ' cases shown';
    }
  }

  function selectText(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
  function copied(button, text) {
    button.textContent = text;
    setTimeout(function () { button.textContent = 'Copy'; }, 1500);
  }
  all('button.copy').forEach(function (button) {
    var code = document.getElementById(button.getAttribute('data-for'));
    if (!code) return;
    button.hidden = false;
    button.addEventListener('click', function () {
      var text = code.textContent;
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () { copied(button, 'Copied'); },
          function () { selectText(code); copied(button, 'Press Ctrl+C'); });
      } else {
        selectText(code);
        var ok = false;
        try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
        copied(button, ok ? 'Copied' : 'Press Ctrl+C');
      }
    });
  });

  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    if (target && target.tagName === 'DETAILS') { target.open = true; target.hidden = false; }
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();
})();
