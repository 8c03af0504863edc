// Markdown for chat replies, built as DOM nodes: model text only ever becomes text nodes (textContent), never
// HTML, so a reply containing <script> or <img onerror=...> shows as those characters.
//
// CeraMarkdown.render(text) -> DocumentFragment. Blocks: ``` fenced code (with a Copy button; an unclosed fence,
// as while a reply streams, runs to the end), # headings, - * + and 1. list items, pipe tables (a header row, a
// |---|:--:| row, then rows), paragraphs (their line breaks kept). Inline: `code`, **bold**, *italic*, [text](url)
// links for http:, https: and mailto: URLs only (opened in a new tab, rel="noopener noreferrer"; any other URL, such
// as javascript:, stays as typed). Anything else (HTML included) stays as typed. Between blocks the text's own
// newlines are kept as text nodes, so a reply without Markdown has exactly its own textContent.
'use strict';

self.CeraMarkdown = (() => {
  const FENCE = /^\s{0,3}(```|~~~)\s*([\w+#.-]*)\s*$/;
  const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const ITEM = /^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const INLINE = new RegExp([
    /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/.source,      // `code`  (1: the ticks, 2: the code)
    /\*\*(?=\S)([\s\S]*?\S)\*\*/.source,               // **bold** (3)
    /\*(?=[^\s*])([^*]*?[^\s*])\*/.source,              // *italic* (4)
    /\[([^\]\n]+)\]\(([^()\s]+)\)/.source,                // [text](url) (5, 6)
  ].join('|'), 'g');
  const TABLE_RULE = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;
  const LINK_PROTOCOLS = new Set(['http:', 'https:', 'mailto:']);

  // The URL of a link if it may be one (http, https or mailto, absolute), else null.
  function safeUrl(url) {
    try {
      const u = new URL(url);
      return LINK_PROTOCOLS.has(u.protocol) ? u.href : null;
    } catch (e) {
      return null;
    }
  }

  // The cells of a table row: split on | (not \|), the outer pipes dropped.
  function cells(line) {
    const parts = line.trim().replace(/^\|/, '').replace(/(^|[^\\])\|$/, '$1').split(/(?<!\\)\|/);
    return parts.map((c) => c.trim().replace(/\\\|/g, '|'));
  }

  // Whether lines[i] starts a table: a row with a pipe, then a rule with as many columns.
  function tableAt(lines, i) {
    return i + 1 < lines.length && lines[i].includes('|') && TABLE_RULE.test(lines[i + 1]) &&
      cells(lines[i]).length === cells(lines[i + 1]).length;
  }

  function table(lines, i) {
    const head = cells(lines[i]);
    const align = cells(lines[i + 1]).map((c) => (c.endsWith(':') ? (c.startsWith(':') ? 'center' : 'right')
                                                                     : c.startsWith(':') ? 'left' : ''));
    const t = el('table');
    const row = (texts, tag) => {
      const tr = el('tr');
      head.forEach((_, k) => {
        const cell = el(tag);
        if (align[k]) cell.style.textAlign = align[k];
        inline(cell, texts[k] || '');
        tr.append(cell);
      });
      return tr;
    };
    const thead = el('thead');
    thead.append(row(head, 'th'));
    const tbody = el('tbody');
    let j = i + 2;
    while (j < lines.length && lines[j].trim() && lines[j].includes('|')) tbody.append(row(cells(lines[j++]), 'td'));
    t.append(thead, tbody);
    const box = el('div', 'table-wrap');   // wide tables scroll inside the reply, not the page
    box.append(t);
    return [box, j];
  }

  function el(tag, className) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  // Inline spans of one block's text, appended to `parent`.
  function inline(parent, text) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) parent.append(text.slice(last, m.index));
      let node;
      if (m[1]) {
        node = el('code');
        node.textContent = m[2];
      } else if (m[3] !== undefined) {
        node = el('strong');
        inline(node, m[3]);
      } else if (m[4] !== undefined) {
        node = el('em');
        inline(node, m[4]);
      } else {
        const href = safeUrl(m[6]);
        if (href) {
          node = el('a');
          node.href = href;
          node.target = '_blank';
          node.rel = 'noopener noreferrer';
          inline(node, m[5]);
        } else {
          node = document.createTextNode(m[0]);   // not a link we make: the text as typed
        }
      }
      parent.append(node);
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.append(text.slice(last));
  }

  // A "Copy" button that puts `text` on the clipboard (named `label` for assistive technology); the page uses it for
  // whole replies too.
  function copyButton(text, label, className = 'copy') {
    const copy = el('button', className);
    copy.type = 'button';
    copy.textContent = 'Copy';
    copy.setAttribute('aria-label', label);
    copy.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(text);
        copy.textContent = 'Copied';
      } catch (e) {
        copy.textContent = 'Copy failed';
      }
      setTimeout(() => { copy.textContent = 'Copy'; }, 1500);
    });
    return copy;
  }

  function codeBlock(code, lang) {
    const box = el('div', 'code-block');
    const copy = copyButton(code, 'Copy code');
    const pre = el('pre');
    const c = el('code');
    if (lang) c.dataset.lang = lang;
    c.textContent = code;
    pre.append(c);
    box.append(copy, pre);
    return box;
  }

  function render(text) {
    const lines = text.split('\n');
    const out = document.createDocumentFragment();
    let end = -1;   // the last line of the previous block
    const add = (node, first, last) => {   // the block of lines first..last, after the newlines before it
      const gap = end < 0 ? first : first - end;
      if (gap > 0) out.append('\n'.repeat(gap));
      out.append(node);
      end = last;
    };
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      const fence = line.match(FENCE);
      if (fence) {
        let j = i + 1;
        while (j < lines.length && !(lines[j].trim().startsWith(fence[1]) && lines[j].trim().replace(/[`~]/g, '') === '')) j++;
        add(codeBlock(lines.slice(i + 1, j).join('\n'), fence[2]), i, Math.min(j, lines.length - 1));
        i = j + 1;
        continue;
      }
      const heading = line.match(HEADING);
      if (heading) {
        const h = el(`h${Math.min(heading[1].length + 2, 6)}`);
        inline(h, heading[2]);
        add(h, i, i);
        i++;
        continue;
      }
      if (tableAt(lines, i)) {
        const [node, j] = table(lines, i);
        add(node, i, j - 1);
        i = j;
        continue;
      }
      const item = line.match(ITEM);
      if (item) {
        const ordered = /\d/.test(item[1]);
        const list = el(ordered ? 'ol' : 'ul');
        if (ordered && parseInt(item[1], 10) !== 1) list.start = parseInt(item[1], 10);
        let j = i;
        let m;
        while (j < lines.length && (m = lines[j].match(ITEM)) && /\d/.test(m[1]) === ordered) {
          const li = el('li');
          inline(li, m[2]);
          if (j > i) list.append('\n');
          list.append(li);
          j++;
        }
        add(list, i, j - 1);
        i = j;
        continue;
      }
      if (!line.trim()) {
        i++;
        continue;
      }
      let j = i;   // a paragraph: up to a blank line or the start of another block
      while (j + 1 < lines.length && lines[j + 1].trim() && !FENCE.test(lines[j + 1]) && !HEADING.test(lines[j + 1]) &&
             !ITEM.test(lines[j + 1]) && !tableAt(lines, j + 1)) j++;
      const p = el('p');
      inline(p, lines.slice(i, j + 1).join('\n'));
      add(p, i, j);
      i = j + 1;
    }
    if (end < lines.length - 1) out.append('\n'.repeat(end < 0 ? lines.length - 1 : lines.length - 1 - end));
    return out;
  }

  return {render, copyButton};
})();
