"""How long does one live refresh of the Playground take on a long run? `python -m tools.bench_live_refresh`

Builds a finished run of 2,000 requests and ~20,000 engine steps with the engine's own
scheduler (cost-model clock: this is a measurement of the page, not of the model), then
times what one refresh of the Playground's live fragment does:

  snapshot   LiveRun.snapshot(summary=False), as the page takes it (under the engine's step lock)
  tables     snapshot -> DataFrames (first refresh converts every step; later ones only new steps)
  charts     every chart builder the page calls, with the page's arguments, plus the headline
  to_json    the JSON text of those figures (analysis.figure_json.ready: what the live charts send)

Prints the median of several refreshes. This is an upper bound for one redraw: while the engine
runs, the page redraws the status, headline and batch chart at every refresh, and the time
charts and texts every other refresh or so (playground/pace.py sets how often). A measurement,
not a test.
"""
from __future__ import annotations

import argparse
import statistics
import time

from analysis import frame_metrics
from analysis.figure_json import figure_dict, ready
from analysis.tables import TraceTables
from engine.runs.arrivals import build_requests
from engine.core.config import EngineConfig
from engine.runs.live import LiveRun
from playground import view
from playground.setup import Setup


def long_run(n_requests: int, max_num_seqs: int, out_lo: int, out_hi: int) -> tuple[LiveRun, Setup]:
    setup = Setup(rate=8.0, continuous=False, num_requests=n_requests, max_num_seqs=max_num_seqs,
                  prompt_lo=32, prompt_hi=256, output_lo=out_lo, output_hi=out_hi,
                  kv_capacity_tokens=8192, ttft_slo_s=2.0, tpot_slo_s=0.1)
    live = LiveRun(setup.policy(), setup.workload(), model=None, config=EngineConfig(kv_pool_tokens=8192))
    for r in build_requests(setup.workload()):
        live.engine.submit(r)
    for i, s in enumerate((setup.changed(max_num_seqs=8), setup)):   # two policy changes, marked
        live.engine.run(should_stop=lambda: len(live.engine.steps) >= 6000 * (i + 1))
        live.engine.set_policy(s.policy())
    live.engine.run()
    return live, setup


def page_builders(tables, setup) -> dict:
    """The figures one live refresh builds, from the page's own builders: name -> callable."""
    return {"pg_batch": lambda: view.batch_figure(tables, setup),
            **view.time_figures(tables, setup)}


def page_extras(tables, setup) -> dict:
    """What else a refresh computes: the headline strip, the status line, the texts."""
    return {
        "headline": lambda: frame_metrics.headline(tables.requests, tables.steps, setup.ttft_slo_s,
                                                   setup.tpot_slo_s, setup.max_num_seqs),
        "largest_batch": lambda: view.largest_batch(tables.steps),
        "latest_texts": lambda: view.latest_texts(tables),
    }


def page_charts(tables, setup) -> list:
    return [build() for build in page_builders(tables, setup).values()]


def refresh(live, setup, tables: TraceTables) -> dict:
    t0 = time.perf_counter()
    snap = live.snapshot(summary=False)   # as the page takes it
    t1 = time.perf_counter()
    tabs = tables.update(snap)
    t2 = time.perf_counter()
    figs = page_charts(tabs, setup)
    for extra in page_extras(tabs, setup).values():
        extra()
    t3 = time.perf_counter()
    for f in figs:
        ready(figure_dict(f))
    t4 = time.perf_counter()
    return {"snapshot": t1 - t0, "tables": t2 - t1, "charts": t3 - t2, "to_json": t4 - t3}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)

    t = time.perf_counter()
    live, setup = long_run(args.requests, args.slots, 120, 200)
    steps, reqs = live.engine.steps, live.engine.requests.values()
    finished = sum(r.status.value == "finished" for r in reqs)
    print(f"run: {len(steps)} steps, {finished}/{len(live.engine.requests)} requests finished, "
          f"{len(live.engine.marks)} policy marks ({time.perf_counter() - t:.1f} s to make)")

    tables = TraceTables()
    first = refresh(live, setup, tables)
    print("first refresh (every step converted): " +
          ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in first.items()))
    runs = [refresh(live, setup, tables) for _ in range(args.repeat)]
    med = {k: statistics.median(r[k] for r in runs) * 1000 for k in runs[0]}
    print(f"live refresh, median of {args.repeat}:")
    for k, v in med.items():
        print(f"  {k:9s} {v:7.1f} ms")
    build = med["tables"] + med["charts"]
    print(f"  {'build':9s} {build:7.1f} ms   (tables + charts: the page's own work)")
    print(f"  {'total':9s} {sum(med.values()):7.1f} ms   (+ snapshot + to_json)")

    tabs = tables.update(live.snapshot(summary=False))
    print("per chart (median ms):")
    for name, build in {**page_builders(tabs, setup), **page_extras(tabs, setup)}.items():
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            build()
            times.append(time.perf_counter() - t)
        print(f"  {name:18s} {statistics.median(times) * 1000:6.1f}")


if __name__ == "__main__":
    main()
