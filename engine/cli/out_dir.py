"""A run's output folder, written whole or not at all, and never lost once the run has finished.

`OutDir` checks --out before the run starts: a file, a place that cannot be written, or a
folder holding anything besides a previous run's files is refused (replacing it would delete
someone's files). The run writes into a temporary folder, and `commit()` puts it in place:

- the usual way, a folder beside --out swapped in by two renames: the previous run's folder is
  moved aside, the new one renamed in, the old one deleted. A run stopped at any point leaves
  --out as it was; only in the instant between the two renames is --out absent, with the
  previous run beside it as .NAME.tmp-*-old.
- in place, where --out cannot be renamed (a mount point, as a container's volume is) or its
  parent cannot be written: the files are moved into --out one by one, summary.json last. The
  old summary.json goes first, so a folder with a summary.json always holds one whole run.
  `commit` falls back to this when the usual renames fail.

If even that fails, the finished run is kept as NAME.unsaved-* beside --out (or in it) and
the error says where. Each temporary folder carries its process id; a later run removes the
ones whose process is gone (a run killed with SIGKILL leaves one), puts back a previous run
that a kill left aside, and says what it did (`notes`).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import time

RUN_FILES = {"requests.csv", "steps.csv", "summary.json", "workload.jsonl"}
MARKER = "summary.json"          # written last: a folder with it holds one whole run
ALLOWED = "a new folder, or the folder of a previous run"


class OutDir:
    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.committed = False
        self.notes: list[str] = []       # what was tidied or how the files were placed, for the user
        parent, self.name = os.path.split(self.path)
        if os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"--out {path} is a file (allowed: {ALLOWED})")
        above = parent
        while not os.path.lexists(above):
            above = os.path.dirname(above)
        if not os.path.isdir(above):
            raise ValueError(f"--out {path} cannot be made: {above} is a file (allowed: {ALLOWED})")
        self._tidy(parent)
        others = sorted(set(os.listdir(self.path)) - RUN_FILES - set(self._ours(self.path))) \
            if os.path.isdir(self.path) else []
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise ValueError(f"--out {path} holds other files ({shown}) that replacing it would "
                             f"delete (allowed: {ALLOWED})")
        in_place = os.path.isdir(self.path) and (os.path.ismount(self.path) or not os.access(parent, os.W_OK))
        if in_place:
            why = "is a mount point" if os.path.ismount(self.path) else "is in a folder this run cannot write"
            self.notes.append(f"--out {self.path} {why}: its files are written into it one by one, summary.json last")
        try:
            os.makedirs(parent, exist_ok=True)
            where = self.path if in_place else parent
            prefix = ".tmp-" if in_place else f".{self.name}.tmp-"
            self.tmp = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=where)
        except OSError as exc:
            raise ValueError(f"--out {path} cannot be written: {exc.strerror or exc} (allowed: {ALLOWED})") from None
        os.chmod(self.tmp, 0o755)   # mkdtemp makes it owner-only

    def __enter__(self) -> "OutDir":
        return self

    def __exit__(self, *exc) -> None:
        if not self.committed:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def commit(self) -> None:
        """Put the finished folder in place of --out (or its files into --out)."""
        if os.path.dirname(self.tmp) == self.path:
            self._commit_in_place()
            return
        old = self.tmp + "-old"
        try:
            if os.path.isdir(self.path):
                os.rename(self.path, old)
            try:
                os.rename(self.tmp, self.path)
            except OSError:
                if os.path.isdir(old):
                    os.rename(old, self.path)   # put the previous run back before trying the other way
                raise
        except OSError as exc:
            self.notes.append(f"--out {self.path} could not be renamed into place ({exc.strerror or exc}): "
                              "wrote its files into it one by one, summary.json last")
            os.makedirs(self.path, exist_ok=True)
            self._commit_in_place()
            return
        self.committed = True
        shutil.rmtree(old, ignore_errors=True)

    def _commit_in_place(self) -> None:
        try:
            if os.path.lexists(os.path.join(self.path, MARKER)):
                os.remove(os.path.join(self.path, MARKER))
            new = sorted(set(os.listdir(self.tmp)), key=lambda f: f == MARKER)   # the marker last
            for f in new:
                _move(os.path.join(self.tmp, f), os.path.join(self.path, f))
            for f in RUN_FILES - set(new):                # a previous run's file this run does not have
                if os.path.lexists(os.path.join(self.path, f)):
                    os.remove(os.path.join(self.path, f))
        except OSError as exc:
            kept = self._keep()
            raise OSError(f"the run finished, but its files could not be put into --out {self.path} "
                          f"({exc.strerror or exc}); they are kept in {kept}") from None
        self.committed = True
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _keep(self) -> str:
        """Rename the temporary folder to a name no later run tidies away; where it is now."""
        kept = os.path.join(os.path.dirname(self.tmp), f"{self.name}.unsaved-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            os.rename(self.tmp, kept)
        except OSError:
            kept = self.tmp
        self.committed = True                             # __exit__ must not delete it
        return kept

    # ----- leftovers of interrupted runs

    def _ours(self, folder: str) -> list[str]:
        """Names in `folder` that runs of this --out make: temporary folders and files, any process."""
        pattern = re.compile(r"\.tmp-\d+-.*" if folder == self.path else rf"\.{re.escape(self.name)}\.tmp-.*")
        return [f for f in os.listdir(folder) if pattern.fullmatch(f)] if os.path.isdir(folder) else []

    def _tidy(self, parent: str) -> None:
        """Remove what runs killed mid-way left beside and in --out; put back a previous run left aside."""
        for folder in (parent, self.path):
            for f in self._ours(folder):
                full = os.path.join(folder, f)
                pid = re.search(r"\.tmp-(\d+)-", f)
                if pid and _alive(int(pid.group(1))):
                    continue                              # a run writing this --out right now
                if f.endswith("-old") and folder == parent and not os.path.lexists(self.path):
                    os.rename(full, self.path)
                    self.notes.append(f"put back the previous run into --out {self.path} (an interrupted run had moved it aside to {f})")
                    continue
                shutil.rmtree(full, ignore_errors=True) if os.path.isdir(full) else os.remove(full)
                self.notes.append(f"removed {full}, left by an interrupted run")


def _move(src: str, dst: str) -> None:
    """Move one file into place at once: a rename, or across file systems a copy under a
    temporary name in the destination folder, then a rename."""
    try:
        os.replace(src, dst)
    except OSError:
        part = tempfile.mktemp(prefix=f".tmp-{os.getpid()}-", dir=os.path.dirname(dst))
        shutil.copyfile(src, part)
        os.replace(part, dst)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
