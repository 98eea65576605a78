"""Where the app's step times go: every real step the app's engine takes, written down as it runs.

    .venv/bin/python -m tools.trace_steps serve PORT OUT.jsonl     # the app (streamlit run app.py), traced
    .venv/bin/python -m tools.trace_steps headless SECONDS OUT.jsonl [--setup QUERY]   # a Playground run, no page

One JSON line per step the step model records (engine/step_fit.py): the time it ends (monotonic),
the step alone (its own start to end), the gap before it (from the previous step's end), the shape,
and what the model in use predicted for it before it joined a refit. Beside them, one line per
pause of the engine's own (`gc`: the collector, any thread) and per snapshot a page takes of the
run (`snap`: the time it waited for the step lock and held it), so a slow step can be laid beside
what competed with it. `summarize` (tools/check_presets --trace) reads the file back.
A measurement, not a test: nothing here runs in the app unless this module starts it.
"""
from __future__ import annotations

import engine  # noqa: F401  (first, as app.py: the engine's OpenMP wait, before torch loads)

import argparse
import gc
import json
import statistics
import sys
import threading
import time


class Trace:
    def __init__(self, path: str):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, **row) -> None:
        with self.lock:
            self.f.write(json.dumps(row) + "\n")


def install(path: str) -> Trace:
    """Wrap the engine's step, the live run's snapshot and the collector so each writes a line."""
    from engine.core.engine import Engine
    from engine.runs.live import LiveRun
    trace = Trace(path)

    step = Engine._step

    def traced_step(self):
        observer, seen = self.step_observer, {}
        went_on_from = self._went_on_from
        if observer is not None:
            fit = getattr(observer, "__self__", None)

            def wrapped(shape, ms):
                if fit is not None:
                    seen.update(shape=list(shape), ms=ms, predicted=fit.offset_ms + fit.scale * fit.base.predict(shape),
                                profile=fit.base.predict(shape), offset=fit.offset_ms, scale=fit.scale)
                observer(shape, ms)
            self.step_observer = wrapped
        try:
            rec = step(self)
        finally:
            self.step_observer = observer
        if rec is not None and seen:
            running = sum(1 for m in rec.members if m[1] == "decode")
            trace.write(kind="step", t=time.monotonic(), step=rec.step, alone_ms=1000 * (rec.t_end_s - rec.t_start_s),
                        gap_ms=1000 * (rec.t_start_s - went_on_from), decodes=running,
                        prefill=rec.prefill_tokens, thread=threading.current_thread().name, **seen)
        return rec

    Engine._step = traced_step

    snapshot = LiveRun.snapshot

    def traced_snapshot(self, *a, **k):
        t0 = time.monotonic()
        lock = self._lock_from_outside

        def timed_lock():
            cm = lock()

            class Timed:
                def __enter__(s):
                    cm.__enter__()
                    s.t1 = time.monotonic()

                def __exit__(s, *exc):
                    cm.__exit__(*exc)
                    trace.write(kind="snap", t=time.monotonic(), wait_ms=1000 * (s.t1 - t0),
                                held_ms=1000 * (time.monotonic() - s.t1))
            return Timed()
        self._lock_from_outside = timed_lock
        try:
            return snapshot(self, *a, **k)
        finally:
            del self._lock_from_outside

    LiveRun.snapshot = traced_snapshot

    started = {}

    def on_gc(phase, info):
        if phase == "start":
            started[threading.get_ident()] = time.monotonic()
        else:
            t0 = started.pop(threading.get_ident(), None)
            if t0 is not None:
                trace.write(kind="gc", t=time.monotonic(), ms=1000 * (time.monotonic() - t0),
                            generation=info.get("generation"), thread=threading.current_thread().name)
    gc.callbacks.append(on_gc)
    return trace


def serve(port: int, out: str) -> None:
    install(out)
    import os
    if os.environ.get("XSWITCH"):
        sys.setswitchinterval(float(os.environ["XSWITCH"]))
    from streamlit.web import cli
    sys.argv = ["streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
                "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
                "--browser.gatherUsageStats", "false"]
    cli.main()


def headless(seconds: float, out: str, query: str = "") -> None:
    from urllib.parse import parse_qs

    from engine.model.model import load_model
    from engine.sim.machine_speed import machine_speed
    from playground.run import PlaygroundRun
    from playground.setup import Setup
    install(out)
    model = load_model("smollm2")
    machine_speed(model, measure_if_missing=True)   # as the page does: the refit now records every step
    setup, _ = Setup.from_query({k: v[-1] for k, v in parse_qs(query).items()})
    run = PlaygroundRun(setup, model)
    run.start()
    time.sleep(seconds)
    run.stop()


def read(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def errors(rows: list[dict], after_s: float = 0.0) -> list[float]:
    """Relative errors |predicted − real| / real of the steps past `after_s` of the trace's first step."""
    steps = [r for r in rows if r["kind"] == "step"]
    if not steps:
        return []
    t0 = steps[0]["t"]
    return [abs(r["predicted"] - r["ms"]) / r["ms"] for r in steps if r["t"] - t0 >= after_s]


def summarize(rows: list[dict], after_s: float = 30.0) -> str:
    steps = [r for r in rows if r["kind"] == "step"]
    if not steps:
        return "no steps recorded"
    t0 = steps[0]["t"]
    late = [r for r in steps if r["t"] - t0 >= after_s]
    err = errors(rows, after_s)
    med = lambda xs: statistics.median(xs) if xs else float("nan")   # noqa: E731
    return (f"{len(steps)} steps, {len(late)} after {after_s:.0f} s: median error {100 * med(err):.1f}%, "
            f"step alone median {med([r['alone_ms'] for r in late]):.1f} ms, gap median "
            f"{med([r['gap_ms'] for r in late]):.1f} ms (mean {statistics.fmean([r['gap_ms'] for r in late]) if late else 0:.1f})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("port", type=int)
    s.add_argument("out")
    h = sub.add_parser("headless")
    h.add_argument("seconds", type=float)
    h.add_argument("out")
    h.add_argument("--setup", default="", help="the Playground's address query (its setup); default: the defaults")
    r = sub.add_parser("summary")
    r.add_argument("trace")
    r.add_argument("--after", type=float, default=30.0)
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        serve(args.port, args.out)
    elif args.cmd == "headless":
        headless(args.seconds, args.out, args.setup)
    else:
        print(summarize(read(args.trace), args.after))


if __name__ == "__main__":
    main()
