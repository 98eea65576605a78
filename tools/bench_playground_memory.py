"""Memory of one Playground run on the real model under continuous traffic (a measurement, not a test).

A PlaygroundRun with the Playground's default setup (continuous traffic) runs SmolLM2 on this
machine; a reader does what the page's live view does every 0.5 s: apply the sliders once they
rest, read a snapshot and its tables, and compute the status line and the headline numbers.
Every 30 s a "slider" moves (max_num_seqs 16 <-> 8), so change marks come and go too. Prints
the process's RSS every minute and its growth after warm-up. Goal: < 50 MB after warm-up.
"read ms" is one refresh's reading, the wait for the step in progress to end included.
Warm-up is over once the step window has filled (KEEP_STEPS steps) and the KV pool's pages have
been touched (RSS grows while the batch first reaches new KV peaks): 5 minutes on a small CPU.

    python -m tools.bench_playground_memory [--minutes 30] [--warmup-minutes 5] [--rate 4]
                                            [--keep-steps 2000]
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time
import tracemalloc
from pathlib import Path

from analysis import frame_metrics
from engine.runs.live import KEEP_STEPS
from engine.model.model import load_model
from playground.run import PlaygroundRun
from playground.setup import Setup
from playground.status import status_text
from tools.bench_memory import rss_mb

READ_EVERY_S = 0.5          # the page's live refresh
MOVE_SLIDER_EVERY_S = 30.0


def rss_by_kind() -> dict[str, float]:
    """Resident MB by kind of mapping (/proc/self/smaps): the main heap ([heap]), anonymous
    mappings (glibc's per-thread arenas, large mallocs, the KV pool), and files (code, weights)."""
    kinds, kind = {"heap": 0.0, "anon": 0.0, "file": 0.0}, "anon"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            name = head[5] if len(head) > 5 else ""
            kind = "heap" if name == "[heap]" else "file" if name.startswith("/") else "anon"
        elif line.startswith("Rss:"):
            kinds[kind] += int(head[1]) / 1024
    return kinds


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def malloc_mb() -> tuple[float, float, float]:
    """glibc's own count (mallinfo2), in MB: (in use, free but kept in the arenas, mmapped chunks).
    In use growing is memory something still holds; free growing is the allocator's fragmentation."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return info.uordblks / 2**20, info.fordblks / 2**20, info.hblkhd / 2**20


def trimmed_rss() -> float:
    """RSS after glibc's malloc_trim(0) returns the free pages of every arena to the system."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mb()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--warmup-minutes", type=float, default=5.0,
                    help="growth is measured from the end of this (the step window fills first)")
    ap.add_argument("--keep-steps", type=int, default=KEEP_STEPS,
                    help="the run's step window (smaller: a shorter run reaches its steady state)")
    ap.add_argument("--rate", type=float, default=Setup().rate, help="arrival rate, requests/s")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--trim", action="store_true",
                    help="each minute, hand the C allocator's free memory back to the system (malloc_trim) "
                         "after reading RSS, and also print RSS after that: what is garbage kept by the "
                         "allocator, not memory in use")
    ap.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                    help="trace Python's allocations (numpy's too) with this many frames each, and at the "
                         "end print the sites that grew most since the warm-up (slows the run)")
    args = ap.parse_args()
    if args.tracemalloc:
        tracemalloc.start(args.tracemalloc)
    warm_snapshot = None

    model = load_model(args.model)
    setup = Setup(rate=args.rate)
    assert setup.endless, "the Playground's default setup should be continuous traffic"
    lab = PlaygroundRun(setup, model)
    lab.live.engine.keep_steps = args.keep_steps
    print(f"model {model.name} on {model.device}; rate {args.rate:g} req/s, continuous; "
          f"window {args.keep_steps:,} steps; "
          f"RSS before the run: {rss_mb():.0f} MB")
    print(f"{'min':>5} {'steps':>8} {'steps/s':>8} {'arrived':>8} {'waiting':>8} {'kept steps':>10} "
          f"{'requests':>9} {'marks':>6} {'KV used':>8} {'read ms':>8} {'py kblocks':>10} {'RSS MB':>8}"
          + (f" {'trimmed':>8}" if args.trim else "") + "  heap / anon / file MB  malloc: in use / free / mmapped MB")
    lab.start()
    start = time.monotonic()
    end, next_report, next_move = start + args.minutes * 60, start + 60, start + MOVE_SLIDER_EVERY_S
    warm_rss, rows, last_steps, read_ms = None, [], 0, []
    while time.monotonic() < end and lab.state == "running":
        now = time.monotonic()
        if now >= next_move:
            next_move += MOVE_SLIDER_EVERY_S
            setup = setup.changed(max_num_seqs=8 if setup.max_num_seqs == 16 else 16)
        lab.heartbeat()
        t0 = time.perf_counter()
        lab.apply_when_rested(setup, now)
        snap, tables = lab.read()
        status_text(snap.state, tables, lab.setup, snap.arrived)
        frame_metrics.headline(tables.requests, tables.steps, lab.setup.ttft_slo_s,
                               lab.setup.tpot_slo_s, lab.setup.max_num_seqs, tables.retired)
        read_ms.append(1000 * (time.perf_counter() - t0))
        if now >= next_report:
            next_report += 60
            minute = (now - start) / 60
            rss, steps = rss_mb(), lab.steps_taken
            eng = lab.live.engine
            print(f"{minute:>5.1f} {steps:>8,} {(steps - last_steps) / 60:>8.1f} {lab.arrived:>8,} "
                  f"{len(eng.scheduler.waiting):>8,} {len(eng.steps):>10,} {len(eng.requests):>9,} "
                  f"{len(tables.marks):>6} {eng.pool.used_blocks / eng.pool.num_blocks:>8.0%} "
                  f"{sum(read_ms) / len(read_ms):>8.1f} {sys.getallocatedblocks() / 1000:>10,.0f} {rss:>8.1f}"
                  + (f" {trimmed_rss():>8.1f}" if args.trim else "")
                  + "  " + " / ".join(f"{v:.0f}" for v in rss_by_kind().values())
                  + "  " + " / ".join(f"{v:.0f}" for v in malloc_mb()), flush=True)
            rows.append((minute, rss))
            last_steps, read_ms = steps, []
            if warm_rss is None and minute >= args.warmup_minutes:
                warm_rss = rss
                warm_snapshot = tracemalloc.take_snapshot() if args.tracemalloc else None
        time.sleep(max(0.0, READ_EVERY_S - (time.monotonic() - now)))
    state, message = lab.state, lab.live.message
    lab.close()
    if state != "running":
        print(f"the run stopped early: {state} {message}")
    if warm_rss is None or len(rows) < 2:
        print("too short to judge growth after warm-up (run longer than --warmup-minutes)")
        return
    if warm_snapshot is not None:
        print("Python allocations that grew most since the warm-up (tracemalloc):")
        for stat in tracemalloc.take_snapshot().compare_to(warm_snapshot, "traceback")[:12]:
            print(f"  {stat.size_diff / 2**20:+8.1f} MB {stat.count_diff:+8,} blocks  "
                  + " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in stat.traceback))
    growth = rows[-1][1] - warm_rss
    print(f"RSS growth after warm-up ({args.warmup_minutes:g} -> {rows[-1][0]:.1f} min): "
          f"{growth:+.1f} MB (goal < 50 MB: {'met' if growth < 50 else 'NOT met'})")


if __name__ == "__main__":
    main()
