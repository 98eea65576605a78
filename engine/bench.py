"""`python -m engine bench` (filled in below)."""


def add_bench_flags(p):
    pass


def bench_command(args):
    raise SystemExit("bench: not yet")
