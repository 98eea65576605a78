import os
import sys

# Before torch loads: the server's OpenMP threads sleep at a barrier instead of spinning. A server
# shares its cores with its HTTP side and, in a classroom, with the app and browsers; there a
# spinning worker burns the time slices the others need (engine/__init__.py).
if sys.argv[1:2] == ["serve"]:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from engine.cli import main  # noqa: E402

sys.exit(main())
