"""Run every lesson lab's experiments on this machine and print the figures each lab shows.

    python -m tools.measure_all            # uses cached results where present
    python -m tools.measure_all --refresh  # measure everything again
    python -m tools.measure_all --only knee queueing --json runs/figures.json

The same functions as the lab pages (labs/<lab>/experiment.py), so these are the pages' numbers.
BATCHING_LAB_MODEL picks the model (default smollm2); BATCHING_LAB_CACHE the cache folder.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from engine.core.config import STEP_PRIORITIES
from labs import runs
from labs.costs import experiment as costs_lab
from labs.dynamic_batching import experiment as dynamic_lab
from labs.knee import experiment as knee_lab
from labs.queueing import experiment as queueing_lab
from labs.scheduler_orders import experiment as orders_lab
from labs.slo_goodput import experiment as slo_lab
from labs.static_vs_continuous import experiment as svc_lab
from labs.tail import experiment as tail_lab
from labs.why_batch import experiment as why_batch_lab

LABS = ["why_batch", "static_vs_continuous", "dynamic_batching", "costs", "slo_goodput", "queueing", "knee", "tail",
        "scheduler_orders"]


def progress_printer(name: str, every_s: float = 5.0):
    """A run's progress callback that prints to stderr at most every `every_s` seconds, and at the end."""
    last = [0.0]

    def cb(f, text):
        now = time.perf_counter()
        if now - last[0] > every_s or f >= 1:
            last[0] = now
            print(f"  [{name}] {f:4.0%} {text}", file=sys.stderr, flush=True)
    return cb


def _busy_cpu_s() -> float:
    """CPU seconds all processes on this machine have used since boot (from /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except OSError:
        return math.nan
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0.0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class ContentionMonitor:
    """Samples, every `every_s`, how many cores other processes use; `peak` is the largest sample.

    Two processes running torch on two cores do not just share them: their threads wait on each
    other at every parallel region, and a 30 ms decode step can take seconds. So a lab counts as
    clean only if no sample saw other processes use more than a small share of a core.
    """

    def __init__(self, every_s: float = 0.5):
        import threading
        self.every_s, self.samples = every_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        busy, own, t = _busy_cpu_s(), _own_cpu_all_threads(), time.monotonic()
        while not self._stop.wait(self.every_s):
            b, o, n = _busy_cpu_s(), _own_cpu_all_threads(), time.monotonic()
            self.samples.append(max(0.0, (b - busy) - (o - own)) / max(n - t, 1e-9))
            busy, own, t = b, o, n

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False

    @property
    def peak(self) -> float:
        return max(self.samples, default=0.0)

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else 0.0


def _own_cpu_all_threads() -> float:
    """This process's CPU seconds so far, every thread included (from /proc/self/stat)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (float(fields[11]) + float(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return _own_cpu_s()


def wait_quiet(max_other_cores: float, max_wait_s: float) -> float:
    """Wait (up to max_wait_s) until other processes use less than max_other_cores; return their use."""
    deadline = time.monotonic() + max_wait_s
    while True:
        b0, t0 = _busy_cpu_s(), time.monotonic()
        time.sleep(3)
        other = (_busy_cpu_s() - b0) / (time.monotonic() - t0)
        if other < max_other_cores or time.monotonic() > deadline:
            return other
        print(f"  waiting: other processes are using {other:.1f} cores", file=sys.stderr, flush=True)


class QuietGuard:
    """labs.runs.run_guard for this script: before each measurement wait for the other processes
    to go quiet; measure again (up to `retries` times) when they took more than `max_cores` at any
    moment during it. Run-sized retries succeed far more often than retrying a whole lab."""

    def __init__(self, quiet_cores: float, max_cores: float, retries: int, max_wait_s: float):
        self.quiet_cores, self.max_cores, self.retries, self.max_wait_s = quiet_cores, max_cores, retries, max_wait_s
        self.peaks: list[float] = []      # of the accepted measurements
        self.means: list[float] = []
        self.seconds: list[float] = []    # how long each accepted measurement ran
        self.retried = 0

    def __call__(self, measure, refresh):
        for attempt in range(1 + self.retries):
            wait_quiet(self.quiet_cores, self.max_wait_s)
            t = time.perf_counter()
            with ContentionMonitor() as mon:
                out = measure(refresh or attempt > 0)
            took = time.perf_counter() - t
            if out[1]:                        # served from the cache: nothing was timed
                return out
            if mon.peak <= self.max_cores or attempt == self.retries:
                self.peaks.append(mon.peak)
                self.means.append(mon.mean)
                self.seconds.append(took)
                return out
            self.retried += 1
            print(f"  other processes took up to {mon.peak:.2f} cores during that run: measuring it again",
                  file=sys.stderr, flush=True)

    def take(self) -> dict:
        out = {"other_cores_peak": round(max(self.peaks, default=0.0), 2),
               "other_cores_mean": round(sum(self.means) / len(self.means), 2) if self.means else 0.0,
               "runs_measured_again": self.retried,
               "measuring_seconds": round(sum(self.seconds), 1)}
        self.peaks, self.means, self.seconds, self.retried = [], [], [], 0
        return out


def _machine():
    """This machine's step model (its saved profile, else the hand-set guess): the labs size their
    arrival rates with it, as their pages do."""
    from engine.sim.profile import load_profile
    from engine.core.step_model import UNCALIBRATED
    found = load_profile(os.environ.get("BATCHING_LAB_MODEL", "smollm2"))
    return UNCALIBRATED if found is None else found.step_model


def _r(x, d=3):
    if isinstance(x, float):
        return None if math.isnan(x) else round(x, d)
    return x


def why_batch(model, refresh):
    rows, hit = why_batch_lab.batch_scaling(model, progress=progress_printer("why_batch"), refresh=refresh)
    table = why_batch_lab.scaling_table(rows)
    fit = why_batch_lab.linear_fit(rows)
    return {
        "cached": hit,
        "rows": [{k: _r(v) for k, v in r.items()} for r in table.to_dict("records")],
        "knee_batch": why_batch_lab.knee(rows),
        "tok_s_batch1": _r(rows[0]["tokens_per_s"], 1),
        "tok_s_batch32": _r(next(r["tokens_per_s"] for r in rows if r["batch"] == 32), 1),
        "linear_fit": {k: _r(v) for k, v in fit.items()},
    }


def static_vs_continuous(model, refresh):
    out = {}
    for key in svc_lab.WORKLOADS:
        both = svc_lab.both_modes(model, key, progress=progress_printer(f"svc {key}"), refresh=refresh)
        s = {m: svc_lab.mode_summary(res, svc_lab.SLOTS) for m, (res, _) in both.items()}
        out[key] = {
            "static": {k: _r(v) for k, v in s["static"].items()},
            "continuous": {k: _r(v) for k, v in s["continuous"].items()},
            "throughput_ratio_cont_over_static": _r(s["continuous"]["output_tok_s"] / s["static"]["output_tok_s"]),
            "cached": all(h for _, h in both.values()),
        }
    return out


def dynamic_batching(model, refresh):
    rate = dynamic_lab.rate_for(_machine())
    table = dynamic_lab.wait_table(dynamic_lab.wait_runs(model, rate, progress=progress_printer("dynamic"), refresh=refresh))
    return {"outcome": dynamic_lab.outcome(table),
            "rows": [{k: _r(v) for k, v in r.items()} for r in table.to_dict("records")]}


def costs(model, refresh):
    out = {}
    for priority in STEP_PRIORITIES:   # the default step priority keeps the key "chunked_prefill"
        stall = costs_lab.stall_runs(model, costs_lab.long_arrivals(_machine()), step_priority=priority, progress=progress_printer(f"costs stall {priority}"),
                                     refresh=refresh)
        key = "chunked_prefill" if priority == costs_lab.STEP_PRIORITY else f"chunked_prefill_{priority}"
        out[key] = {k: {m: _r(v) for m, v in costs_lab.stall_summary(res).items()} for k, (res, _) in stall.items()}
    kv = {}
    for cap in (costs_lab.KV_DEFAULT, 1024, 512):
        res, _ = costs_lab.kv_run(model, cap, progress=progress_printer(f"costs kv {cap}"), refresh=refresh)
        kv[cap] = {m: _r(v) for m, v in costs_lab.kv_summary(res).items()}
    return {**out, "kv_capacity": kv}


def slo_goodput(model, refresh):
    rate_runs = slo_lab.rate_runs(model, slo_lab.rates_for(_machine()), progress=progress_printer("slo"), refresh=refresh)
    out = {}
    for ttft, tpot in ((0.8, 0.06), (2.0, 0.1)):
        out[f"ttft<={ttft}s,tpot<={tpot * 1000:g}ms"] = {
            f"rate {rate:g}/s": {k: _r(v) for k, v in slo_lab.goodput(res, ttft, tpot).items()}
            for rate, res, _ in rate_runs}
    return out


def queueing(model, refresh):
    mu, rho_runs = queueing_lab.capacity_and_runs(model, progress=progress_printer("queueing"), refresh=refresh)
    return {"mu_req_s": _r(mu),
            "points": [{k: _r(v) for k, v in queueing_lab.queue_point(rho, res, mu).items()}
                       for rho, res, _ in rho_runs]}


def knee(model, refresh):
    sweep = knee_lab.max_num_seqs_runs(model, progress=progress_printer("knee"), refresh=refresh)
    table = knee_lab.knee_table(sweep, None, 0.06)
    return {"knee_max_num_seqs": knee_lab.find_knee(table),
            "rows": [{k: _r(v) for k, v in r.items()} for r in table.to_dict("records")]}


def tail(model, refresh):
    out = {}
    for share in (0.0, 0.1):
        res, _ = tail_lab.tail_run(model, tail_lab.rate_for(_machine(), share), share,
                                   progress=progress_printer(f"tail {share:.0%}"), refresh=refresh)
        reqs, _ = runs.frames(res)
        out[f"long share {share:.0%}"] = {
            "ttft_by_prompt": tail_lab.percentile_table(reqs, "ttft_s", tail_lab.prompt_bucket(reqs["prompt_tokens"]))
                              .round(3).to_dict("records"),
            "ttft_by_tenant": tail_lab.percentile_table(reqs, "ttft_s", reqs["tenant"]).round(3).to_dict("records"),
        }
    return out


def scheduler_orders(model, refresh):
    by_order = orders_lab.order_runs(model, orders_lab.rate_for(_machine()), progress=progress_printer("orders"),
                                     refresh=refresh)
    table = orders_lab.tenant_table(by_order)
    return {"table": table.round(3).to_dict("records"), "sentences": orders_lab.winners(table)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refresh", action="store_true", help="measure again even where cached")
    ap.add_argument("--only", nargs="*", choices=LABS, help="just these labs")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="CORES",
                    help="before each run, wait until other processes use fewer than CORES cores")
    ap.add_argument("--max-wait", type=float, default=600, help="longest wait for quiet, seconds")
    ap.add_argument("--retries", type=int, default=0,
                    help="with --wait-quiet: measure a run again (up to this many times) when other processes "
                         "took more than twice CORES at any moment while it ran")
    args = ap.parse_args(argv)

    from engine.model.model import load_model
    model = load_model(os.environ.get("BATCHING_LAB_MODEL", "smollm2"))
    report = {"model": model.name, "dtype": str(model.dtype), "labs": {}}
    guard = None
    if args.wait_quiet:
        guard = runs.run_guard = QuietGuard(args.wait_quiet, 2 * args.wait_quiet, args.retries, args.max_wait)
    for name in args.only or LABS:
        t = time.perf_counter()
        with ContentionMonitor() as mon:
            figures = globals()[name](model, args.refresh)
        seconds = time.perf_counter() - t
        # other processes competing for the two cores distort every timing: say how much they took
        quiet = guard.take() if guard else {"other_cores_peak": round(mon.peak, 2),
                                             "other_cores_mean": round(mon.mean, 2)}
        report["labs"][name] = {"seconds": round(seconds, 1), **quiet, **figures}
        print(f"== {name} ({seconds:.1f} s; other processes on the {os.cpu_count()} cores while measuring: "
              f"{quiet['other_cores_mean']:.2f} on average, {quiet['other_cores_peak']:.2f} at the peak)")
        print(json.dumps(figures, indent=1, default=str, ensure_ascii=False))
        sys.stdout.flush()
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
