"""The worked examples' runs read in words: a sentence for each way a run can come out, so a lesson never
states an outcome its run did not have. No Streamlit."""
from __future__ import annotations

from course.examples import line_through, ridge


def step_example_reading(rows: list[dict], machine: str) -> str:
    """Lesson 1's table on one machine (step_table at BATCHES) in sentences, worded for each way it can
    come out: the straight line t0 + cB through its rows, what 1 -> 8 and 32 -> 64 sequences give and cost,
    and its knee (below the last row, or at it: still climbing)."""
    at = {r["batch"]: r for r in rows}
    t0, c = line_through(rows)
    line = f"On {machine} a straight line through the rows gives $t_0 \\approx$ {t0:,.1f} ms and $c \\approx$ {c:,.3g} ms"
    if not (c > 0 and t0 > 0):
        line += ". "
    elif t0 / c > 2 * rows[-1]["batch"]:     # a line this flat says nothing past the rows it was fitted to
        line += (": so flat over these rows that its ceiling lies far beyond them, where the step is no longer "
                 "the weight read and the line no longer holds. ")
    else:
        line += (f": a ceiling $1/c$ of {1000 / c:,.0f} tokens/s, half of it at $B = t_0/c \\approx$ "
                 f"{t0 / c:,.0f}, and 90% only near $9\\,t_0/c \\approx$ {9 * t0 / c:,.0f}. ")
    gain, wait = at[8]["tok_s"] / at[1]["tok_s"], at[8]["step_ms"] / at[1]["step_ms"]
    first = (f"From 1 to 8 sequences throughput grows {gain:.1f} times while each user's gap between tokens grows "
             f"{wait:.1f} times" + (": sharing the step pays. " if gain > wait else
                                    ": here each sequence already costs about as much as it brings. "))
    gain, wait = at[64]["tok_s"] / at[32]["tok_s"] - 1, at[64]["step_ms"] / at[32]["step_ms"] - 1
    second = f"From 32 to 64, throughput grows {gain:.0%} while every user waits {wait:.0%} longer per token. "
    k = next(r for r in rows if r["knee"])
    best = max(r["tok_s"] for r in rows)
    if k is rows[-1]:
        before = rows[-2]
        knee_words = (f"By the rule the knee is {k['batch']}, the last row: {before['batch']} gives only "
                      f"{before['tok_s'] / best:.0%} of the best, so the curve has not flattened by {k['batch']}.")
    else:
        knee_words = (f"By the rule the knee is {k['batch']}, at {k['tok_s'] / best:.0%} of the best "
                      f"({best:,.0f} tokens/s): the rows past it add little.")
    return line + first + second + knee_words


def knee_reading(rows: list[dict], machine: str) -> str:
    """One machine's sweep (knee_sweep_on) in a sentence, worded for each way it can come out: a knee
    below the largest setting (what the next setting adds, what it costs the streams), or a knee at the
    largest setting tried (still climbing: it lies there or beyond)."""
    k = next(r for r in rows if r["knee"])
    best = max(r["tok_s"] for r in rows)
    i = rows.index(k)
    if i + 1 == len(rows):
        before = rows[i - 1]
        return (f"On {machine} throughput was still climbing at the largest setting tried, {k['max_num_seqs']} "
                f"({before['tok_s']:,.0f} tokens/s at {before['max_num_seqs']}, {k['tok_s']:,.0f} at "
                f"{k['max_num_seqs']}): its knee lies at {k['max_num_seqs']} or beyond, and only a longer sweep "
                "can say where.")
    after = rows[i + 1]
    return (f"On {machine} the knee is {k['max_num_seqs']}: {k['tok_s']:,.0f} tokens/s, {k['tok_s'] / best:.0%} of "
            f"the best. Going on to {after['max_num_seqs']} adds {after['tok_s'] / k['tok_s'] - 1:.0%} throughput "
            f"while the p95 TPOT over all streams goes from {k['tpot_p95_ms']:,.0f} to {after['tpot_p95_ms']:,.0f} ms.")


def ridge_sentence(device, name: str) -> str:
    """Where a device's decode steps turn compute-bound (ridge), in words."""
    r = ridge(device)
    return (f"{name} does {r['flop_per_byte']:,.0f} FLOPs in the time it reads a byte, so a decode step's weight "
            f"products stay memory-bound up to about {r['batch']:,.0f} sequences in {device.dtype}: below that, "
            "another sequence costs little more than its own attention")
