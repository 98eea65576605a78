"""The n-gram drafter (prompt lookup): guess a request's next tokens from its own text.

The last n tokens of a request (prompt + output so far) are looked up earlier in that same
text; where they occurred before, the tokens that followed them then are the guess. n is tried
from `max_n` down to `min_n`, and the longest n that matches wins; among matches of that length
the earliest one, as vLLM's NgramProposer picks (vllm/v1/spec_decode/ngram_proposer.py). At most
`k` tokens are drafted, fewer when the text after the match runs out.

It costs no model at all, and it guesses well exactly when the output repeats the input:
a passage copied, code edited, a document summarised with its own phrases. On free writing the
lookup rarely matches and nothing is drafted.
"""
from __future__ import annotations


def propose(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """Up to `k` drafted tokens to follow `tokens`, or [] when no n-gram of `min_n`..`max_n`
    tokens at the end of `tokens` occurred earlier in it."""
    total = len(tokens)
    if k <= 0 or total < min_n + 1:
        return []
    last = tokens[-1]
    best_n, best_end = 0, -1          # the longest match so far, and where it ends (its last token)
    j = -1
    while True:
        try:
            j = tokens.index(last, j + 1, total - 1)     # an earlier place the last token occurred
        except ValueError:
            break
        n = 1                          # how far back the match goes from there, up to max_n
        while n < max_n and n <= j and tokens[j - n] == tokens[total - 1 - n]:
            n += 1
        if n > best_n:                 # strictly longer: an earlier match of equal length stays
            best_n, best_end = n, j
            if n == max_n:
                break
    if best_n < min_n:
        return []
    return tokens[best_end + 1:best_end + 1 + k]
