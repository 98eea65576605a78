"""Token ids to streamed text, with stop strings.

Each update decodes only a short window: the tokens read at the last update and the new
ones. The new text is what the window decodes to beyond the last tokens' own text. The
window's head gives the tokenizer the context it needs: a tokenizer may drop the leading
space of the first token it decodes, and a token can be half of a UTF-8 character (decoded
as U+FFFD until the next token completes it, so such a tail waits for the next update).
Decoding the whole output at every update instead costs time that grows with the output,
for every stream, on the event loop that also takes in new requests.

With stop strings, the last few characters are held back until we know they do not start one.
"""
from __future__ import annotations


class TextStream:
    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop = stop
        self.holdback = max((len(s) for s in stop), default=1) - 1
        self.ids: list[int] = []
        self.text = ""                # the output's text so far, whole characters only
        self.head = 0                 # the window starts at ids[head]...
        self.read = 0                 # ...and ids[head:read] is already in self.text
        self.sent = 0                 # characters already sent
        self.stopped = False          # a stop string was seen: generation should end

    def add(self, token_ids: list[int], final: bool = False) -> str:
        """The new text to send after `token_ids`; `final` flushes what was held back."""
        if self.stopped:
            return ""
        self.ids += token_ids
        self.text += self._decoded_tail(final)
        text, end = self.text, len(self.text)
        if self.stop:
            hits = [i for i in (text.find(s, max(0, self.sent - self.holdback)) for s in self.stop) if i >= 0]
            if hits:
                self.stopped = True
                end = min(hits)
            elif not final:
                end -= self.holdback
        if end <= self.sent:
            return ""
        new, self.sent = text[self.sent:end], end
        return new

    def _decoded_tail(self, final: bool) -> str:
        """The text that the tokens after ids[read] add (nothing yet if it ends mid-character)."""
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)
        known = decode(self.ids[self.head:self.read])
        window = decode(self.ids[self.head:])
        if window.endswith("\ufffd") and not final:
            return ""                 # an unfinished character: wait for the next token
        self.head, self.read = self.read, len(self.ids)
        return window[len(known):]
