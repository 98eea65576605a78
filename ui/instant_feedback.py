"""Feedback drawn in the browser the moment a button is clicked: `instant_feedback(...)`.

A click on a Streamlit button runs the page script again, and the page can only say what the
click did once that run's new elements reach the browser: about half a second on a small machine
with the browser on it, which reads as "nothing happened". This script, in an iframe of the
app's own origin (hidden by the page's style), listens for clicks on one button in the page
itself. On a click it lays a line of text over the status line at once, in the status line's
own place and font, and takes it away as soon as the page has redrawn that line (or after `MAX_S`). It never
changes Streamlit's own elements, so nothing the server draws is lost or fought over.
"""
from __future__ import annotations

import html
import json

import streamlit as st

MAX_S = 20          # the overlay goes after this long even if the status line never changes

SCRIPT = """
<script>
(() => {
  const cfg = %(cfg)s;
  const doc = window.parent.document;
  const hooks = doc.__instantFeedback || (doc.__instantFeedback = {});
  if (hooks[cfg.button]) return;                    // one listener per button, however many reruns
  hooks[cfg.button] = true;
  const statusLine = () => [...doc.querySelectorAll('[data-testid=stMarkdownContainer] p')]
      .find(p => p.innerText.startsWith(cfg.prefix));
  doc.addEventListener('click', event => {
    const button = event.target.closest('.st-key-' + cfg.button + ' button');
    const line = statusLine();
    if (!button || button.disabled || !line) return;
    const before = line.innerText, box = line.getBoundingClientRect(), style = getComputedStyle(line);
    const cover = doc.createElement('p');
    cover.className = 'instant-feedback';
    cover.innerHTML = cfg.html;
    Object.assign(cover.style, {
      position: 'fixed', left: box.left + 'px', top: box.top + 'px', width: box.width + 'px',
      minHeight: box.height + 'px', margin: 0, zIndex: 1000, font: style.font, color: style.color,
      background: getComputedStyle(doc.querySelector('.stApp') || doc.body).backgroundColor,
    });
    doc.body.appendChild(cover);
    const t0 = performance.now();
    const check = () => {
      const now = statusLine();
      if (!now || now.innerText !== before || performance.now() - t0 > cfg.maxMs) cover.remove();
      else setTimeout(check, 50);
    };
    setTimeout(check, 50);
  }, true);
})();
</script>
"""


def instant_feedback(button_key: str, status_prefix: str, markdown_bold: str, rest: str) -> None:
    """On a click of the button with key `button_key`, show "**markdown_bold** rest" over the
    paragraph that starts with `status_prefix` until the page redraws it."""
    cfg = {"button": button_key, "prefix": status_prefix, "maxMs": MAX_S * 1000,
           "html": f"<strong>{html.escape(markdown_bold)}</strong> {html.escape(rest)}"}
    st.iframe(SCRIPT % {"cfg": json.dumps(cfg)}, height=1)    # the page style hides its container
