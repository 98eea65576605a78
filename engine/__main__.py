import sys

from engine.cli import main  # importing the engine sets how its OpenMP threads wait (engine/__init__.py)

sys.exit(main())
