// Markdown for chat replies, built as DOM nodes: model text only ever becomes text nodes (textContent), never
// HTML, so a reply containing <script> or <img onerror=...> shows as those characters.
//
// CeraMarkdown.render(text) -> DocumentFragment. Blocks: ``` fenced code (with a Copy button; an unclosed fence,
// as while a reply streams, runs to the end), # headings, - * + and 1. list items, paragraphs (their line breaks
// kept). Inline: `code`, **bold**, *italic*. Anything else (links, tables, HTML) stays as typed. Between blocks the
// text's own newlines are kept as text nodes, so a reply without Markdown has exactly its own textContent.
'use strict';

self.CeraMarkdown = (() => {
  const FENCE = /^\s{0,3}(```|~~~)\s*([\w+#.-]*)\s*$/;
  const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const ITEM = /^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|\*(?=[^\s*])([^*]*?[^\s*])\*/g;

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
      } else {
        node = el('em');
        inline(node, m[4]);
      }
      parent.append(node);
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.append(text.slice(last));
  }

  function codeBlock(code, lang) {
    const box = el('div', 'code-block');
    const copy = el('button', 'copy');
    copy.type = 'button';
    copy.textContent = 'Copy';
    copy.setAttribute('aria-label', 'Copy code');
    copy.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(code);
        copy.textContent = 'Copied';
      } catch (e) {
        copy.textContent = 'Copy failed';
      }
      setTimeout(() => { copy.textContent = 'Copy'; }, 1500);
    });
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
             !ITEM.test(lines[j + 1])) j++;
      const p = el('p');
      inline(p, lines.slice(i, j + 1).join('\n'));
      add(p, i, j);
      i = j + 1;
    }
    if (end < lines.length - 1) out.append('\n'.repeat(end < 0 ? lines.length - 1 : lines.length - 1 - end));
    return out;
  }

  return {render};
})();
