"""`python -m engine run`: one workload through the engine, with a progress bar and a summary table.

Every request read becomes one row of requests.csv, refused ones included (requests in = rows
out). The files are written into a temporary folder beside --out and renamed into place at the
end, so --out holds one whole run, the previous one or this one, never a mix. Ctrl-C or SIGTERM
stops the run at the next step: nothing more is admitted, the requests not finished are aborted
(finishing them could take minutes on a slow model), what there is gets written with
"partial": true in summary.json, and the exit status is 130 or 143. A second Ctrl-C quits at
once without writing. A run in which no request finished (every one refused or failed) still
writes its files, says so, and exits with status 3 (NOTHING_SERVED), so a script notices.

--simulate runs the same engine on a virtual clock with step times from a profile
(engine/sim/simulate.py); --cost-model is --simulate --profile hand-set. The files are the same,
and summary.json says "simulated": true, names the profile and says the token ids are stand-ins.
"""
from __future__ import annotations

import signal
import sys
from dataclasses import asdict, replace

from ..runs.arrivals import build_requests
from ..runs.build import build_engine
from ..core.config import EngineConfig
from ..core.metrics import SLO, summarize
from ..runs.run_files import write_run
from ..core.request import Request
from ..sim.simulate import HAND_SET, SimProfile, build_simulation, resolve_profile
from ..core.validation import Limits, max_prompt_chars
from ..runs.workload import PromptMaker, check_workload_file, read_jsonl, write_jsonl
from .out_dir import OutDir

NOTHING_SERVED = 3         # the exit status of a run that wrote its files but finished no request


def run_command(args, policy, spec) -> int:
    config = EngineConfig(model=args.model, device=args.device, dtype=args.dtype,
                          kv_pool_tokens=args.kv_pool_tokens, seed=args.seed).validate()
    if args.workload:
        check_workload_file(args.workload)
    profile = simulation_profile(args, config)
    # One handler for the whole command: a signal while the model loads stops the run before its first step.
    with StopOnSignal() as stop, OutDir(args.out) as out:     # a bad --out is refused here, before the run
        for note in out.notes:                                # leftovers of an interrupted run, tidied
            print(note, file=sys.stderr)
        engine, model = start_engine(args, config, policy, profile, spec)
        rows = submit_all(engine, args, spec, model)
        run_with_progress(engine, should_stop=lambda: bool(stop.signum))
        partial = bool(stop.signum)
        for r in rows:
            if not r.done:
                engine.abort(r, f"run interrupted by {stop.name} before this request finished")
        summary = summarize(rows, engine.steps, SLO(policy.ttft_slo_s, policy.tpot_slo_s))
        summary.update(partial=partial,
                       config=asdict(replace(config, kv_pool_tokens=engine.pool.num_blocks * engine.pool.block_size)), policy=policy.to_dict(),
                       device=engine.executor.device, dtype=engine.executor.dtype)
        if profile is not None:
            summary.update(profile.summary_fields())
        write_run(out.tmp, rows, engine.steps, summary)
        if not args.workload:
            write_jsonl(f"{out.tmp}/workload.jsonl", rows)
        tidied = len(out.notes)
        out.commit()
    for note in out.notes[tidied:]:                          # how the files were placed, if not the usual way
        print(note, file=sys.stderr)
    print_summary(summary)
    if profile is not None:
        print(f"simulated with the {profile.label}; token ids are stand-ins")
    for r in rows:
        if r.error:
            print(f"  {r.id}: {r.status.value}: {r.error}", file=sys.stderr)
    print(f"wrote {args.out}/requests.csv, steps.csv, summary.json" + (" (partial)" if partial else ""))
    if stop.signum:
        return 128 + stop.signum
    if not summary["finished"]:
        print(f"nothing was served: none of the {summary['requests']:,} requests finished "
              f"({summary['rejected']:,} rejected, {summary['failed']:,} failed, {summary['aborted']:,} aborted)",
              file=sys.stderr)
        return NOTHING_SERVED
    return 0


def simulation_profile(args, config: EngineConfig) -> SimProfile | None:
    """The profile of a simulated run (--simulate, --cost-model); None for a real run."""
    if args.profile and not args.simulate:
        raise ValueError("--profile names the step times of a simulated run: add --simulate")
    if args.cost_model and args.simulate:
        raise ValueError(f"--cost-model is --simulate --profile {HAND_SET}: give one or the other")
    if args.cost_model:
        return resolve_profile(HAND_SET)
    if args.simulate:
        return resolve_profile(args.profile, config.model, config.dtype, config.device)
    return None


def start_engine(args, config: EngineConfig, policy, profile: SimProfile | None, spec=None):
    """The engine, once its KV pool is known to fit in this machine's memory."""
    if profile is not None:
        return build_simulation(config, policy, profile, spec.draft_acceptance if spec else 0.0), None
    from ..model.model import load_model
    print(f"loading {config.model} ...", file=sys.stderr)
    model = load_model(config.model, config.device, config.dtype)
    return build_engine(config, policy, model), model


def submit_all(engine, args, spec, model) -> list[Request]:
    """Every request of the workload, submitted or rejected with its reason: the readable lines
    in file order, then the refused ones."""
    tokenizer = engine.tokenizer
    if not args.workload:
        return submit_each(engine, args, build_requests(spec, PromptMaker(tokenizer) if tokenizer else None))
    vocab = model.config.vocab_size if model is not None else engine.executor.vocab_size
    max_len = engine.scheduler.max_model_len
    limits = Limits(vocab, max_len, max_prompt_chars=max_prompt_chars(tokenizer, max_len) if tokenizer else None)
    requests, errors = read_jsonl(args.workload, tokenizer, limits)
    if not requests and not errors:
        raise ValueError(f"workload {args.workload} is empty")
    rows = submit_each(engine, args, requests)
    for _, rid, err in errors:      # after the good ones, so a refused line never takes a good one's id
        rows.append(Request(id=rid, prompt_token_ids=[], max_new_tokens=0))
        engine.reject(rows[-1], err)
    return rows


def submit_each(engine, args, requests: list[Request]) -> list[Request]:
    allowed = {t for t in args.allowed_tenants.split(",") if t}
    for r in requests:
        if allowed and r.tenant not in allowed:
            engine.reject(r, f"unknown tenant {r.tenant!r} (allowed: {', '.join(sorted(allowed))})")
            continue
        try:
            engine.submit(r)
        except ValueError as exc:   # an id a refused line already used
            engine.reject(r, str(exc))
    return requests


def run_with_progress(engine, should_stop) -> None:
    from tqdm import tqdm

    total = sum(r.max_new_tokens for r in engine.pending)
    with tqdm(total=total, unit="tok", desc="generating", file=sys.stderr) as bar:
        def on_step(rec):
            bar.n = sum(len(r.output_token_ids) for r in engine.requests.values())
            bar.refresh()
        engine.run(on_step=on_step, should_stop=should_stop)


class StopOnSignal:
    """While active, Ctrl-C (SIGINT) or SIGTERM asks the run to stop at the next step; a second
    one quits at once, without writing (exit status 128 + the signal's number)."""
    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum, self.name = 0, ""

    def __enter__(self) -> "StopOnSignal":
        self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def _handle(self, signum, frame) -> None:
        if self.signum:
            raise SystemExit(128 + signum)
        self.signum, self.name = signum, signal.Signals(signum).name
        print(f"\n{self.name}: stopping at the next step and writing what there is "
              "(send it again to quit without writing)", file=sys.stderr)


def print_summary(s: dict) -> None:
    print(f"\nrequests {s['requests']}  finished {s['finished']}  rejected {s['rejected']}  "
          f"failed {s['failed']}  aborted {s['aborted']}  preemptions {s['preemptions']}  steps {s['steps']}")
    print(f"duration {s['duration_s']:.2f} s   output throughput {s['output_throughput_tok_s']:.1f} tok/s   "
          f"goodput {s['goodput_req_s']:.2f} req/s")
    print(f"{'metric':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p95':>10}{'p99':>10}")
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s"):
        d = s[name]
        print(f"{name[:-2] + ' (ms)':<10}" + "".join(f"{d[k] * 1000:>10.1f}" for k in ("mean", "p50", "p90", "p95", "p99")))
