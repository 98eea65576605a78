"""Guessing ahead: n-gram speculative decoding off and on, side by side, on the real engine.

Two workloads: prompts that ask the model to copy a passage of the prompt set (PromptMaker.repeat_passage:
the output repeats the input, where the n-gram lookup guesses well) and free questions from the same set
(the answer is new text, where it rarely does). Each case runs with speculative_method off, then ngram,
then off, then ngram... (A B A B, so a slow spell of the shared machine falls on both), each on a fresh
engine, every request greedy:
  - batch 1 (max_num_seqs 1), copies and free text: a decode step is bound by reading the weights, so
    checking k more rows in it costs little, and every accepted guess is a token without a step;
  - a large batch of copies, all at once: a step's products are bound by arithmetic, and every drafted row
    costs its share, accepted or not.
The same cases run at once on the simulator, on this machine's step model and on a named GPU's roofline
(the simulator has no text to look up: each drafted token is accepted with a chance, the workload's).
No Streamlit here.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict

import pandas as pd

from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.request import Request
from engine.runs import results
from engine.runs.results import RunResult
from engine.runs.workload import PromptMaker, WorkloadSpec
from engine.sim.machine_speed import MachineSpeed
from engine.sim.simulate import SimProfile, resolve_profile, simulate
from course import claims
from labs.part import Part
from labs.runs import cached, estimate, fingerprint

K = 4                          # num_speculative_tokens: vLLM's examples draft a few tokens a step
K_CHOICES = [1, 2, 3, 4, 5, 6, 8]
MAX_NEW = 64                   # output tokens a request (greedy; the passages are at least this long)
ONE_REQUESTS = 4               # batch 1: requests served one after another
BIG = 64                       # the large batch: this many copies at once
BIG_CHOICES = [16, 32, 64, 128]
REPEATS = 2                    # A B pairs per case
PASSAGE = (64, 160)            # passages of this many tokens are copied: long enough for every output token
FREE_PROMPT = 96               # free questions: this many prompt tokens
WORKLOADS = ("copy", "free")
METHODS = ("off", "ngram")
GPU = "h100-sxm:llama-3.1-8b"  # the named GPU profile whose roofline prediction stands beside
# The simulator drafts k tokens at every decode step and accepts each with a chance (given the ones before
# it were accepted). Before a real run has measured it, the chance is assumed: near what makes as many tokens
# a decode step as this engine's copies (about 2.1) and free questions (about 1.2) made at batch 1.
ASSUMED_CHANCE = {"copy": 0.55, "free": 0.15}


# ----------------------------------------------------------------------------- the cases


def cases(big: int = BIG) -> list[tuple[str, int]]:
    """(workload, batch) of every case the lab runs: both workloads at batch 1, copies at the big batch."""
    return [("copy", 1), ("free", 1), ("copy", int(big))]


def requests_in(workload: str, batch: int) -> int:
    return ONE_REQUESTS if batch == 1 else int(batch)


def policy_for(method: str, batch: int, k: int = K) -> SchedulerPolicy:
    """max_num_seqs = batch, with a KV cache and a token budget that hold the whole batch with its drafts,
    so only max_num_seqs sets the batch; drafts 2..5-token n-grams long (the engine's defaults)."""
    kv = max(SchedulerPolicy().kv_capacity_tokens, batch * (PASSAGE[1] + 64 + MAX_NEW + k + 1))
    return SchedulerPolicy(speculative_method=method, num_speculative_tokens=k, max_num_seqs=int(batch),
                           max_num_batched_tokens=max(512, batch * (k + 1)), kv_capacity_tokens=kv)


def prompts(maker: PromptMaker, workload: str, n: int) -> list[list[int]]:
    """`n` prompts of a workload: copies of passages PASSAGE tokens long (wrapping round the set), or free
    questions of FREE_PROMPT tokens drawn with a fixed seed."""
    if workload == "copy":
        picks = [i for i, t in enumerate(maker.texts) if PASSAGE[0] <= len(t) <= PASSAGE[1]]
        return [maker.repeat_passage(picks[i % len(picks)]) for i in range(n)]
    rng = random.Random(7)
    return [maker.make(FREE_PROMPT, rng) for _ in range(n)]


def _config(policy: SchedulerPolicy) -> EngineConfig:
    return EngineConfig(kv_pool_tokens=max(EngineConfig().kv_pool_tokens, policy.kv_capacity_tokens))


def one_run(model, workload: str, batch: int, method: str, k: int = K, seed: int = 0, progress=None,
            refresh: bool = False, peek: bool = False) -> tuple[RunResult, bool] | None:
    """One case with speculation off or on, cached per machine and settings (`seed` only tells the A B
    pairs apart: the requests are the same)."""
    policy = policy_for(method, batch, k)
    config = _config(policy)
    key = {"workload": workload, "requests": requests_in(workload, batch), "max_new": MAX_NEW, "passage": PASSAGE,
           "free_prompt": FREE_PROMPT, "seed": seed}
    path = results.cache_path("spec", fingerprint(model), policy.to_dict(), key, asdict(config))
    label = f"{workload}, batch {batch}, speculation {method}"

    def compute(m):
        from engine.runs.build import build_engine
        engine = build_engine(config, policy, m)
        for i, p in enumerate(prompts(PromptMaker(m.tokenizer), workload, requests_in(workload, batch))):
            engine.submit(Request(f"r{i}", list(p), MAX_NEW))
        return results.run_to_end(engine, policy, progress, label)
    return cached(path, model, compute, refresh, peek, load=lambda data: RunResult(**data), dump=asdict)


def settings(big: int = BIG, repeats: int = REPEATS) -> list[tuple[str, int, int, str]]:
    """Every run, in the order it is made: (workload, batch, pair, method), off then ngram in each pair."""
    return [(w, b, r, m) for w, b in cases(big) for r in range(repeats) for m in METHODS]


def lab_runs(model, k: int = K, big: int = BIG, repeats: int = REPEATS, progress=None, refresh: bool = False,
             peek: bool = False) -> list[tuple[tuple, RunResult, bool]] | None:
    """Every run of the lab: [((workload, batch, pair, method), RunResult, was_cached)], or None when
    peeking finds one missing."""
    todo = settings(big, repeats)
    out = []
    for i, (w, b, r, m) in enumerate(todo):
        sub = None
        if progress is not None:
            sub = (lambda f, text, i=i: progress(min(1.0, (i + f) / len(todo)), text))
        got = one_run(model, w, b, m, k, r, sub, refresh, peek)
        if got is None:
            return None
        out.append(((w, b, r, m), *got))
    return out


def estimate_s(model, k: int = K, big: int = BIG, repeats: int = REPEATS) -> tuple[float, MachineSpeed]:
    """(seconds, the step model that says so) the lab's runs take here, by the step model (which drafts nothing, so the runs
    with speculation count as long as those without: an upper bound where drafts are accepted)."""
    jobs = [(policy_for("off", b, k), [Part(case_spec(w, b))]) for w, b, _, m in settings(big, repeats)]
    return estimate(model, jobs)


def case_spec(workload: str, batch: int) -> WorkloadSpec:
    """A case's requests as a workload: every one submitted at the start (rate 0), at its mean lengths."""
    length = (PASSAGE[0] + PASSAGE[1]) // 2 + 30 if workload == "copy" else FREE_PROMPT
    return WorkloadSpec(num_requests=requests_in(workload, batch), rate=0, prompt_kind="fixed", prompt_lo=length,
                        prompt_hi=length, output_kind="fixed", output_lo=MAX_NEW, output_hi=MAX_NEW)


# ----------------------------------------------------------------------------- the simulator


def sim_requests(workload: str, batch: int) -> list[Request]:
    """The requests of a case for the simulator: their lengths only (it reads no text)."""
    length = (PASSAGE[0] + PASSAGE[1]) // 2 + 30 if workload == "copy" else FREE_PROMPT
    return [Request(f"r{i}", [0] * length, MAX_NEW) for i in range(requests_in(workload, batch))]


def simulated_run(step_model, workload: str, batch: int, method: str, k: int = K,
                  chance: float | None = None) -> RunResult:
    """A case on the simulator: the same scheduler, step times from `step_model` (a StepModel or a
    SimProfile), each drafted token accepted with `chance` (ASSUMED_CHANCE by default)."""
    profile = step_model if isinstance(step_model, SimProfile) else SimProfile(
        getattr(step_model, "label", "") or "step model", getattr(step_model, "label", "") or "step model", step_model)
    policy = policy_for(method, batch, k)
    if profile.kv_capacity_tokens is not None:
        policy = policy.changed(kv_capacity_tokens=min(policy.kv_capacity_tokens, profile.kv_capacity_tokens))
    a = ASSUMED_CHANCE[workload] if chance is None else chance
    engine = simulate(EngineConfig(), policy, profile, sim_requests(workload, batch), draft_acceptance=a)
    res = results.result_of(engine, policy, f"simulated {workload}, batch {batch}, speculation {method}")
    res.summary.update(profile.summary_fields())
    return res


def gpu_profile() -> SimProfile:
    return resolve_profile(GPU)


def simulated_runs(step_model, k: int = K, big: int = BIG, chances: dict | None = None):
    """Every case on the simulator, once: [((workload, batch, 0, method), RunResult, False)]; `chances`
    ({(workload, batch): chance}, measured_chances) in place of the assumed ones."""
    chances = chances or {}
    return [((w, b, 0, m), simulated_run(step_model, w, b, m, k, chances.get((w, b))), False)
            for w, b in cases(big) for m in METHODS]


def chance_for(accepted_per_draft: float, k: int) -> float:
    """The simulator's chance a that gives `accepted_per_draft` accepted tokens per draft of k (a + a² + ...
    + a^k: each token accepted only after the ones before it), by bisection; nan where nothing was drafted."""
    if not math.isfinite(accepted_per_draft):
        return math.nan
    target = min(max(accepted_per_draft, 0.0), float(k))
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(1, k + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def measured_chances(table: pd.DataFrame, k: int) -> dict:
    """{(workload, batch): the simulator's chance} that makes as many tokens a decode step for a request as
    the real runs with speculation made (the simulator drafts at every step; the real lookup not always)."""
    return {(r.workload, int(r.batch)): chance_for(r.tokens_per_step - 1, k) for r in table.itertuples()
            if math.isfinite(r.tokens_per_step)}


# ----------------------------------------------------------------------------- analysis


def run_numbers(res: RunResult) -> dict:
    """Output tok/s (output tokens / the run's span, prompts included, as vLLM's benchmark counts it),
    decode tok/s (the tokens made by the steps that ran no prompt / those steps' time: the part speculation
    changes) and the drafting counts, from one run."""
    s, steps = res.summary, res.steps
    span = (max(st["t_end_s"] for st in steps) - min(st["t_start_s"] for st in steps)) if steps else math.nan
    decode = [st for st in steps if st["prefill_tokens"] == 0 and st["members"]]
    member_steps = sum(len(st["members"]) for st in decode)      # a request's decode steps, summed
    made = member_steps + sum(int(d[2]) for st in decode for d in st["drafts"])
    decode_s = sum(st["t_end_s"] - st["t_start_s"] for st in decode)
    drafts = s.get("spec_decode_num_drafts", 0)
    return {"output_tok_s": s["output_tokens"] / span if span > 0 else math.nan,
            "decode_tok_s": made / decode_s if decode_s > 0 else math.nan, "steps": len(steps),
            "decode_steps": len(decode), "member_steps": member_steps, "made": made,
            "output_tokens": s["output_tokens"], "drafts": drafts,
            "drafted": s.get("spec_decode_num_draft_tokens", 0), "accepted": s.get("spec_decode_num_accepted_tokens", 0)}


def run_rows(runs) -> pd.DataFrame:
    """One row per run: its case, pair, method and numbers."""
    return pd.DataFrame([{"workload": w, "batch": b, "pair": r, "method": m, **run_numbers(res)}
                         for (w, b, r, m), res, _ in runs])


def case_table(runs) -> pd.DataFrame:
    """One row per case (workload, batch): each method's mean output and decode tok/s over its runs, the
    ratios ngram ÷ off (the median of the A B pairs' ratios, with the lowest and highest pair), the
    acceptance of the runs with speculation, and whether every pair's greedy tokens were the same."""
    rows = run_rows(runs)
    tokens = {(w, b, r, m): [q["output_token_ids"] for q in res.requests] for (w, b, r, m), res, _ in runs}
    steps = {(w, b, r, m): res.steps for (w, b, r, m), res, _ in runs}
    out = []
    for (w, b), g in rows.groupby(["workload", "batch"], sort=False):
        off, on = g[g.method == "off"].sort_values("pair"), g[g.method == "ngram"].sort_values("pair")
        pairs = sorted(set(off.pair) & set(on.pair))
        o, n = off.set_index("pair"), on.set_index("pair")
        ratio = [n.output_tok_s[p] / o.output_tok_s[p] for p in pairs]
        dec = [n.decode_tok_s[p] / o.decode_tok_s[p] for p in pairs]
        drafted, accepted, drafts = on.drafted.sum(), on.accepted.sum(), on.drafts.sum()
        same = [tokens.get((w, b, p, "off")) == tokens.get((w, b, p, "ngram")) for p in pairs]
        differ = [(p + 1, rid, first_difference(a, z), prompt_chunks(steps[(w, b, p, "off")], rid),
                   prompt_chunks(steps[(w, b, p, "ngram")], rid)) for p in pairs
                  for rid, a, z in zip(ids(runs, w, b, p), tokens[(w, b, p, "off")], tokens[(w, b, p, "ngram")]) if a != z]
        out.append({"workload": w, "batch": int(b), "pairs": len(pairs),
                    "off_tok_s": off.output_tok_s.mean(), "ngram_tok_s": on.output_tok_s.mean(),
                    "speedup": statistics.median(ratio) if ratio else math.nan,
                    "speedup_lo": min(ratio, default=math.nan), "speedup_hi": max(ratio, default=math.nan),
                    "off_decode_tok_s": off.decode_tok_s.mean(), "ngram_decode_tok_s": on.decode_tok_s.mean(),
                    "decode_speedup": statistics.median(dec) if dec else math.nan,
                    "decode_speedup_lo": min(dec, default=math.nan), "decode_speedup_hi": max(dec, default=math.nan),
                    "off_steps": off.steps.mean(), "ngram_steps": on.steps.mean(),
                    "drafts": int(drafts), "drafted": int(drafted), "accepted": int(accepted),
                    "acceptance": accepted / drafted if drafted else math.nan,
                    "accepted_per_draft": accepted / drafts if drafts else math.nan,
                    "tokens_per_step": on.made.sum() / on.member_steps.sum() if on.member_steps.sum() else math.nan,
                    "identical": all(same) if same else None, "differ": differ})
    return pd.DataFrame(out)


def ids(runs, workload: str, batch: int, pair: int) -> list[str]:
    return next([q["id"] for q in res.requests] for (w, b, r, m), res, _ in runs
                if (w, b, r, m) == (workload, batch, pair, "off"))


def prompt_chunks(steps, rid: str) -> list[int]:
    """The sizes of the chunks request `rid`'s prompt ran in, step by step."""
    return [int(m[2]) for st in steps for m in st["members"] if m[0] == rid and m[1] == "prefill"]


def first_difference(a, b) -> int:
    """The first output position where two token lists differ (as stored: lists, or space-separated text)."""
    a, b = (x.split() if isinstance(x, str) else list(x) for x in (a, b))
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def identity_words(table: pd.DataFrame) -> tuple[bool, str]:
    """(all identical?, a sentence): whether every request wrote the same greedy tokens with speculation on
    and off in every A B pair, and where not, which case, pair, request and output position."""
    pairs = int(table.pairs.sum())
    differ = [(case_label(r.workload, r.batch).split(" (")[0], d) for r in table.itertuples() for d in r.differ]
    if not differ:
        return True, (f"in {pairs} pairs of runs every request wrote the same tokens with speculation on and off: a "
                      "guess is kept only where it equals the token the model would have written.")

    def chunks(c):
        return " + ".join(map(str, c)) or "none"
    where = "; ".join(f"{case}, pair {p}: request {rid} from output token {i + 1} (its prompt ran in chunks of "
                      f"{chunks(off)} tokens without speculation, {chunks(on)} with)"
                      for case, (p, rid, i, off, on) in differ[:4])
    split = [d for _, d in differ if d[3] != d[4]]
    why = ("Drafts take token budget, so a prompt can be cut into other chunks with speculation on; its keys and values "
           "are then summed in another order, which in bf16 can round differently and tip a close choice of token. "
           if split else "")
    defect = (" Where the chunks were the same, a difference is a defect to report: every verified token is meant "
              "to equal plain decoding's to the bit." if len(split) < len(differ) else
              " Every differing request here had its prompt split differently, which alone can change a bf16 token; "
              "a difference where the chunks match would be a defect to report.")
    return False, (f"in {pairs} pairs of runs, {len(differ)} request(s) wrote other tokens with speculation on than off "
                   f"({where}{'; …' if len(differ) > 4 else ''}); every other request matched. " + why + defect.strip())


def row(table: pd.DataFrame, workload: str, batch: int):
    got = table[(table.workload == workload) & (table.batch == batch)]
    return None if got.empty else got.iloc[0]


def _pairs_words(r) -> str:
    return "" if r.pairs < 2 else f" (pairs from {r.speedup_lo:.2f}× to {r.speedup_hi:.2f}×)"


def batch1_verdict(table: pd.DataFrame, workload: str = "copy") -> claims.Verdict:
    """The claim `spec_pays_at_batch_1` on the batch-1 case of `workload` (the claim is about copies; the
    free text is its counter-case)."""
    r = row(table, workload, 1)
    if r is None or not math.isfinite(r.speedup):
        return claims.judge("spec_pays_at_batch_1", math.nan, "", "", "no batch-1 run with speculation off and on.")
    what = "the prompts that copy a passage" if workload == "copy" else "free questions"
    acc = (f"{r.acceptance:.0%} of {r.drafted:,} drafted tokens accepted" if r.drafted
           else "nothing was drafted: the lookup found no earlier n-gram to copy")
    numbers = (f"At batch 1, on {what}, output tok/s was {r.ngram_tok_s:.1f} with n-gram drafts and {r.off_tok_s:.1f} "
               f"without: {r.speedup:.2f}×{_pairs_words(r)}; {acc}, {r.ngram_steps:.0f} steps instead of "
               f"{r.off_steps:.0f}.")
    return claims.judge("spec_pays_at_batch_1", r.speedup,
                        numbers + " Each step still read the weights once, and most guesses became tokens without "
                                  "a step of their own.",
                        numbers + (" Too few guesses were accepted for the extra rows to pay." if r.speedup < 1.0 else
                                   " Speculation helped less than the claim needs: "
                                   + ("few guesses were made or accepted." if not r.drafted or r.acceptance < 0.5 else
                                      "the guesses were accepted, so the machine's load may have hidden the gain"
                                      + (" (compare the pairs)." if r.pairs > 1 else "."))))


def big_batch_verdict(table: pd.DataFrame, batch: int) -> claims.Verdict:
    """The claim `spec_costs_compute_bound` on the copies at `batch`: decode steps' tok/s ngram ÷ off."""
    r = row(table, "copy", batch)
    if r is None or not math.isfinite(r.decode_speedup):
        return claims.judge("spec_costs_compute_bound", math.nan, "", "",
                            f"no run at batch {batch} had a step that ran no prompt, with speculation off and on.")
    numbers = (f"At batch {batch}, on copies, the steps that ran no prompt made {r.ngram_decode_tok_s:.0f} tokens/s "
               f"with drafts and {r.off_decode_tok_s:.0f} without: {r.decode_speedup:.2f}×"
               + ("" if r.pairs < 2 else f" (pairs {r.decode_speedup_lo:.2f}× to {r.decode_speedup_hi:.2f}×)")
               + f", with {r.acceptance:.0%} of the drafted tokens accepted. The whole run's output tok/s "
               f"(its prompts included) was {r.speedup:.2f}×.")
    return claims.judge("spec_costs_compute_bound", r.decode_speedup,
                        numbers + " Every drafted row cost its arithmetic, accepted or not, and the step was bound "
                                  "by arithmetic: the rows bought fewer tokens than they cost.",
                        numbers + (" At this batch the step was still cheap enough per row that the accepted guesses "
                                   "paid for the rejected ones." if r.decode_speedup > 1.0 else
                                   " Speculation cost less than the claim needs here: the machine's load can hide "
                                   "a small cost (the pairs' spread says how much)."))


# ----------------------------------------------------------------------------- labels


def case_label(workload: str, batch: int) -> str:
    what = "copies" if workload == "copy" else "free text"
    return f"{what}, batch {batch}" + (" (output tok/s)" if batch == 1 else " (decode tok/s)")
