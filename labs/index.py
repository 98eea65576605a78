"""The lab pages the app lists: file, title, address and what each one shows.

app.py builds the "Labs" navigation section from this list and the home page describes
each entry: the Playground, then the lesson labs that labs/registry.py lists. No Streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass

from labs.registry import lesson_lab_pages


@dataclass(frozen=True, slots=True)
class LabPage:
    path: str        # page script, relative to the repository root
    title: str
    url_path: str    # the page's address: /playground (lessons link to it as lab:<id>)
    icon: str
    shows: str       # one or two sentences for the home page


PLAYGROUND = LabPage(
    "labs/playground.py", "Playground", "playground", ":material/science:",
    "The real engine, live: pick a workload and a batching policy, press Start, and move any "
    "slider while it runs. Watch who shares each engine step, the queue, TTFT and TPOT against "
    "their targets, throughput, goodput and the KV cache, and step back through the whole run "
    "afterwards.")


LABS = [PLAYGROUND, *lesson_lab_pages()]
