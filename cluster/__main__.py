"""`python -m cluster check`: the lesson's claims on real servers beside the simulator (cluster/check.py)."""
import sys

from .check import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] != "check":
        print("usage: python -m cluster check [--model tiny|smollm2] [--json FILE] [--logs DIR]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(args[1:]))
