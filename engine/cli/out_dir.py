"""A run's output folder, written whole or not at all.

`OutDir` checks --out before the run starts: a file, a place that cannot be written, or a
folder holding anything besides a previous run's files is refused (replacing it would delete
someone's files). It makes a temporary folder beside --out; the run writes there, and
`commit()` swaps it into place: the previous run's folder is moved aside, the new one renamed
in, the old one deleted. A run stopped at any point leaves --out as it was; only in the instant
between the two renames is --out absent, with the previous run beside it as .NAME.tmp-*-old.
"""
from __future__ import annotations

import os
import shutil
import tempfile

RUN_FILES = {"requests.csv", "steps.csv", "summary.json", "workload.jsonl"}
ALLOWED = "a new folder, or the folder of a previous run"


class OutDir:
    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.committed = False
        if os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"--out {path} is a file (allowed: {ALLOWED})")
        others = sorted(set(os.listdir(self.path)) - RUN_FILES) if os.path.isdir(self.path) else []
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise ValueError(f"--out {path} holds other files ({shown}) that replacing it would "
                             f"delete (allowed: {ALLOWED})")
        parent, name = os.path.split(self.path)
        above = parent
        while not os.path.lexists(above):
            above = os.path.dirname(above)
        if not os.path.isdir(above):
            raise ValueError(f"--out {path} cannot be made: {above} is a file (allowed: {ALLOWED})")
        try:
            os.makedirs(parent, exist_ok=True)
            self.tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
        except OSError as exc:
            raise ValueError(f"--out {path} cannot be written: {exc.strerror or exc} (allowed: {ALLOWED})") from None
        os.chmod(self.tmp, 0o755)   # mkdtemp makes it owner-only

    def __enter__(self) -> "OutDir":
        return self

    def __exit__(self, *exc) -> None:
        if not self.committed:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def commit(self) -> None:
        """Put the finished folder in place of --out."""
        old = self.tmp + "-old"
        if os.path.isdir(self.path):
            os.rename(self.path, old)
        os.rename(self.tmp, self.path)
        self.committed = True
        shutil.rmtree(old, ignore_errors=True)
