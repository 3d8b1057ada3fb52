// SPDX-License-Identifier: MIT
// book/book.js: the reader's tools on every page of the HTML book, with no
// network: copy buttons on code blocks, the page's contents opened beside the
// text on a wide screen, and search over this edition's prebuilt index
// (search-index.js, written by tools/book, sets window.BOOK_SEARCH).
// The search page (search.html) reads its query from ?q= or #q=; the box in
// the bar shows the first hits as you type, and Enter opens the search page.
(function () {
  "use strict";
  var zh = (document.documentElement.lang || "").indexOf("zh") === 0;
  var T = zh ? { copy: "复制", copied: "已复制", none: "没有找到“{q}”。", found: "“{q}”：{n} 处",
                 more: "全部结果" }
             : { copy: "Copy", copied: "Copied", none: "Nothing found for “{q}”.", found: "{n} results for “{q}”",
                 more: "All results" };

  // -- copy buttons -----------------------------------------------------------
  function copyText(text, done) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text); done(); });
    } else {
      fallbackCopy(text);
      done();
    }
  }
  function fallbackCopy(text) {
    var ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.appendChild(ta);
    ta.select();
    try { document.execCommand("copy"); } catch (e) { /* nothing else to try */ }
    document.body.removeChild(ta);
  }
  function addCopyButtons() {
    var blocks = document.querySelectorAll("main pre");
    for (var i = 0; i < blocks.length; i++) {
      var pre = blocks[i];
      var host = pre.parentNode.classList.contains("sourceCode") ? pre.parentNode : pre;
      if (host.querySelector(":scope > .copy")) continue;
      var b = document.createElement("button");
      b.type = "button";
      b.className = "copy";
      b.textContent = T.copy;
      b.setAttribute("aria-label", T.copy);
      b.addEventListener("click", (function (p, btn) {
        return function () {
          copyText(p.innerText.replace(/\n$/, ""), function () {
            btn.textContent = T.copied;
            setTimeout(function () { btn.textContent = T.copy; }, 1500);
          });
        };
      })(pre, b));
      if (host === pre) {
        var wrap = document.createElement("div");
        wrap.className = "pre-wrap";
        pre.parentNode.insertBefore(wrap, pre);
        wrap.appendChild(pre);
        host = wrap;
      }
      host.appendChild(b);
      host.classList.add("has-copy");   /* book.css keeps a strip for the button on touch screens */
    }
  }

  // -- the page's contents ----------------------------------------------------
  function openToc() {
    var d = document.querySelector(".page-toc details");
    if (d && window.matchMedia && window.matchMedia("(min-width: 76rem)").matches) d.open = true;
  }

  // The entry of the section being read is marked (a.current) as the page scrolls.
  function followToc() {
    var links = document.querySelectorAll(".page-toc a[href^='#']");
    if (!links.length || !("IntersectionObserver" in window)) return;
    var byId = {}, current = null;
    for (var i = 0; i < links.length; i++) byId[decodeURIComponent(links[i].getAttribute("href").slice(1))] = links[i];
    var io = new IntersectionObserver(function (entries) {
      entries.forEach(function (en) {
        if (!en.isIntersecting) return;
        var a = en.target.bookTocLink;
        if (!a) return;
        if (current) current.classList.remove("current");
        current = a;
        a.classList.add("current");
      });
    }, { rootMargin: "0px 0px -70% 0px" });
    Object.keys(byId).forEach(function (id) {
      var sec = document.getElementById(id);
      if (!sec) return;
      var h = sec.querySelector("h1, h2, h3") || sec;
      h.bookTocLink = byId[id];
      io.observe(h);
    });
  }

  // -- search -----------------------------------------------------------------
  var index = null;
  function loadIndex(then) {
    if (window.BOOK_SEARCH) { prepare(); then(); return; }
    var s = document.createElement("script");
    s.src = "search-index.js";
    s.onload = function () { prepare(); then(); };
    document.head.appendChild(s);
  }
  function prepare() {
    if (index || !window.BOOK_SEARCH) return;
    index = window.BOOK_SEARCH;
    for (var i = 0; i < index.s.length; i++) {
      var e = index.s[i];
      e.lh = fold(e[2]);
      e.lt = fold(e[3]);
    }
  }
  // Case and curly quotes do not matter ("program's" finds "program’s"); one character
  // stays one character, so positions in the folded text are positions in the text.
  function fold(s) {
    return s.toLowerCase().replace(/[\u2018\u2019]/g, "'").replace(/[\u201c\u201d]/g, '"');
  }
  function terms(q) {
    return fold(q).split(/\s+/).filter(function (t) { return t.length > 0; });
  }
  function count(hay, t) {
    var n = 0, i = hay.indexOf(t);
    while (i >= 0 && n < 50) { n++; i = hay.indexOf(t, i + t.length); }
    return n;
  }
  // A term and the book's own words for it (book/termbase.json: an English name or a
  // synonym the zh edition does not use finds the term the book uses).
  function alts(t) { var a = index && index.a && index.a[t]; return a ? [t].concat(a) : [t]; }
  function allAlts(ts) { return [].concat.apply([], ts.map(alts)); }
  // Every term (or one of its alts) must occur in the section's heading or text; headings weigh most.
  function search(q) {
    var ts = terms(q), hits = [];
    if (!index || ts.length === 0) return hits;
    for (var i = 0; i < index.s.length; i++) {
      var e = index.s[i], score = 0, ok = true;
      for (var k = 0; k < ts.length && ok; k++) {
        var as = alts(ts[k]), h = 0, x = 0;
        for (var j = 0; j < as.length; j++) { h += count(e.lh, as[j]); x += count(e.lt, as[j]); }
        if (h + x === 0) ok = false;
        score += 20 * h + x;
      }
      if (ok) hits.push({ e: e, score: score, order: i });
    }
    hits.sort(function (a, b) { return b.score - a.score || a.order - b.order; });
    return hits;
  }
  function escapeHtml(s) {
    return s.replace(/[&<>"]/g, function (c) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]; });
  }
  // The hits of the terms in s, marked: the same matching as fold(), on the text as shown.
  function mark(s, ts) {
    var spans = [], low = fold(s);
    ts.forEach(function (t) {
      for (var i = low.indexOf(t); i >= 0; i = low.indexOf(t, i + t.length)) spans.push([i, i + t.length]);
    });
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var out = "", at = 0;
    spans.forEach(function (sp) {
      if (sp[0] < at) return;
      out += escapeHtml(s.slice(at, sp[0])) + "<mark>" + escapeHtml(s.slice(sp[0], sp[1])) + "</mark>";
      at = sp[1];
    });
    return out + escapeHtml(s.slice(at));
  }
  function snippet(e, ts) {
    var at = -1;
    for (var k = 0; k < ts.length && at < 0; k++) at = e.lt.indexOf(ts[k]);
    if (at < 0) return e[3].slice(0, 160);
    var a = Math.max(0, at - 70), b = Math.min(e[3].length, at + 110);
    return (a > 0 ? "…" : "") + e[3].slice(a, b) + (b < e[3].length ? "…" : "");
  }
  function hitHtml(hit, ts) {
    var e = hit.e, page = index.pages[e[0]];
    ts = allAlts(ts);
    var title = e[2] && e[2] !== page.t ? page.t + " › " + e[2] : page.t;
    return '<li><a href="' + escapeHtml(page.f + "#" + e[1]) + '">' + mark(title, ts) + "</a>" +
           '<p class="snippet">' + mark(snippet(e, ts), ts) + "</p></li>";
  }
  function queryFromUrl() {
    var m = /[?&]q=([^&#]*)/.exec(location.search) || /[#&]q=([^&]*)/.exec(location.hash);
    return m ? decodeURIComponent(m[1].replace(/\+/g, " ")) : "";
  }
  function searchPage(box) {
    var q = queryFromUrl(), input = document.querySelector(".bookbar input[type=search]");
    if (input && q) input.value = q;
    if (!q) return;
    var ts = terms(q), hits = search(q);
    var head = hits.length ? T.found.replace("{n}", hits.length) : T.none;
    box.setAttribute("data-query", q);
    box.setAttribute("data-count", String(hits.length));
    box.innerHTML = '<p class="search-count">' + escapeHtml(head.replace("{q}", q)) + "</p>" +
      '<ol class="search-results">' + hits.map(function (h) { return hitHtml(h, ts); }).join("") + "</ol>";
  }
  function liveSearch(input) {
    var panel = document.createElement("div");
    panel.className = "search-panel";
    panel.hidden = true;
    input.form.appendChild(panel);
    function show() {
      var q = input.value.trim();
      if (!q) { panel.hidden = true; return; }
      loadIndex(function () {
        var ts = terms(q), hits = search(q);
        var head = hits.length ? T.found.replace("{n}", hits.length) : T.none;
        panel.innerHTML = '<p class="search-count">' + escapeHtml(head.replace("{q}", q)) + "</p>" +
          '<ol class="search-results">' + hits.slice(0, 8).map(function (h) { return hitHtml(h, ts); }).join("") +
          "</ol>" + (hits.length > 8 ? '<p><a href="search.html?q=' + encodeURIComponent(q) + '">' +
          T.more + "</a></p>" : "");
        panel.hidden = false;
      });
    }
    input.addEventListener("input", show);
    input.addEventListener("focus", function () { loadIndex(function () {}); });
    input.addEventListener("keydown", function (ev) { if (ev.key === "Escape") panel.hidden = true; });
    document.addEventListener("click", function (ev) { if (!input.form.contains(ev.target)) panel.hidden = true; });
  }

  function start() {
    addCopyButtons();
    openToc();
    followToc();
    var box = document.getElementById("search-page");
    if (box) loadIndex(function () { searchPage(box); });
    var input = document.querySelector(".bookbar input[type=search]");
    if (input && input.form && !box) liveSearch(input);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
