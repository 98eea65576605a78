"""What does the Playground's own work cost the engine, without Streamlit or a browser?
`python -m tools.bench_page_work`

tools/bench_ui_overhead.py measures everything a viewer brings: the page's work, Streamlit's
(script reruns, messages, the websocket) and, on a small machine, the browser itself. This
takes the first apart from the rest. A PlaygroundRun on the real model runs in this process,
alternately alone and with a reader thread doing what the live view does, at its rates: read a
snapshot and its tables every REFRESH_S, build the batch chart and its JSON each time, and the
time charts every TIME_CHARTS_EVERY_S. Prints the engine's steps/s both ways, their ratio, and
the reader's CPU (its thread's own time). A measurement, not a test.
"""
from __future__ import annotations

import argparse

import engine  # noqa: E402,F401  (first, as app.py: the engine's OpenMP wait, before torch loads)
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from playground import view  # noqa: E402
from playground.view import REFRESH_S, TIME_CHARTS_EVERY_S  # noqa: E402
from tools.bench_ui_overhead import SETUP  # noqa: E402
from analysis.figure_json import figure_dict, ready  # noqa: E402


def read_like_the_page(lab, stop: threading.Event, out: dict) -> None:
    cpu0, refreshes, last_time_charts = time.thread_time(), 0, 0.0
    while not stop.is_set():
        t = time.monotonic()
        _, tables = lab.read()
        figures = [view.batch_figure(tables, lab.setup)]
        if t - last_time_charts >= TIME_CHARTS_EVERY_S:
            figures += [build() for build in view.time_figures(tables, lab.setup).values()]
            last_time_charts = t
        for fig in figures:
            ready(figure_dict(fig))
        refreshes += 1
        time.sleep(max(0.0, REFRESH_S - (time.monotonic() - t)))
    out["cpu_s"], out["refreshes"] = time.thread_time() - cpu0, refreshes


def steps_per_s(model, with_reader: bool, warm_s: float, window_s: float) -> tuple[float, float]:
    """(engine steps/s, reader's CPU in cores) over the window."""
    from playground.run import PlaygroundRun
    lab = PlaygroundRun(SETUP, model)
    lab.start()
    time.sleep(warm_s)
    stop, out = threading.Event(), {}
    reader = threading.Thread(target=read_like_the_page, args=(lab, stop, out)) if with_reader else None
    if reader:
        reader.start()
    steps0, t0 = lab.steps_taken, time.monotonic()
    time.sleep(window_s)
    dt = time.monotonic() - t0
    rate = (lab.steps_taken - steps0) / dt
    stop.set()
    if reader:
        reader.join()
    lab.close()
    return rate, out.get("cpu_s", 0.0) / dt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warm", type=float, default=4.0)
    ap.add_argument("--window", type=float, default=14.0)
    args = ap.parse_args(argv)
    from engine.model.model import load_model
    model = load_model("smollm2")
    ratios, cores = [], []
    for i in range(args.rounds):
        alone, _ = steps_per_s(model, False, args.warm, args.window)
        read, cpu = steps_per_s(model, True, args.warm, args.window)
        ratios.append(read / alone)
        cores.append(cpu)
        print(f"round {i + 1}: alone {alone:5.2f} steps/s   with the page's work {read:5.2f} steps/s   "
              f"ratio {read / alone:.2f}   (the page's work: {cpu:.0%} of a core)", flush=True)
    print(f"median ratio {statistics.median(ratios):.2f}; the page's work {statistics.median(cores):.0%} "
          f"of a core")


if __name__ == "__main__":
    main()
