"""Token ids to streamed text, with stop strings.

The whole output is decoded again at each update and only the new tail is sent: a token
can be half of a UTF-8 character (decoded as U+FFFD until the next token completes it), so
decoding token by token would send broken characters. With stop strings, the last few
characters are held back until we know they do not start one.
"""
from __future__ import annotations


class TextStream:
    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop = stop
        self.holdback = max((len(s) for s in stop), default=1) - 1
        self.ids: list[int] = []
        self.sent = 0                 # characters already sent
        self.stopped = False          # a stop string was seen: generation should end

    def add(self, token_ids: list[int], final: bool = False) -> str:
        """The new text to send after `token_ids`; `final` flushes what was held back."""
        if self.stopped:
            return ""
        self.ids += token_ids
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        end = len(text)
        if self.stop:
            hits = [i for i in (text.find(s, max(0, self.sent - self.holdback)) for s in self.stop) if i >= 0]
            if hits:
                self.stopped = True
                end = min(hits)
            elif not final:
                end -= self.holdback
        if not final and not self.stopped:
            while end > self.sent and text[end - 1] == "\ufffd":
                end -= 1               # an unfinished character: wait for the next token
        if end <= self.sent:
            return ""
        new, self.sent = text[self.sent:end], end
        return new
