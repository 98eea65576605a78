"""Pages stay safe with whatever a link or a failure brings: a lab's link value outside its
widget's range is clamped (or ignored) with a warning that names it and the allowed range, no
user-supplied text renders as Markdown, and no traceback or server path reaches the page.

Lab pages run on the tiny model with an empty results cache (nothing is measured here).
"""
import html
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from engine.core.config import ORDERS, STEP_PRIORITIES
from labs.static_vs_continuous.experiment import WORKLOADS
from labs.why_batch import experiment as why_batch
from playground.run import PlaygroundRun
from course.registry import LESSON_LABS
from ui.widgets import plain
from conftest import commit_predictions

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120
HUGE, NOT_A_NUMBER = "99999999", "abc"
INJECTIONS = {"mode": "[log in](https://evil.example)", "order": "![x](https://evil.example/x.png)"}

# Every key a lab writes into its link, with the allowed range its warning must name.
LINK_KEYS = {
    "benchmarking": {"bench_clients": "1, 2, 4, 6, 8"},
    "cluster": {"cl_profile": "l4:llama-3.1-8b, a100-80gb:llama-3.1-8b, h100-sxm:llama-3.1-8b", "cl_replicas": "2–16",
                "cl_bound": "1–3", "cl_startup": "0–180"},
    "costs": {"co_long": "256–1536", "co_budget": "64–512", "co_priority": ", ".join(STEP_PRIORITIES),
              "co_kv": "256–4096"},
    "dynamic_batching": {"db_waits": "0, 100, 250, 500, 1000, 2000, 4000", "db_slots": "2–16",
                         "db_repeats": "1–5"},
    "kv_capacity": {"kv_util": "0.5–0.98", "kv_len": "2048, 4096, 8192, 16384, 32768, 131072",
                    "kv_pool": "512, 1024, 2048, 3072", "kv_workload": "shared, distinct"},
    "knee": {"kn_values": "1, 2, 4, 8, 16, 32, 64", "kn_tpot_ms": "10–300", "kn_ttft_s": "0.5–60",
             "kn_repeats": "1–5"},
    "queueing": {"qu_rhos": "0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.1, 1.25"},
    "scheduler_orders": {"so_orders": ", ".join(ORDERS), "so_load": "0.2–1.5", "so_seed": "0–999"},
    "slo_goodput": {"sg_ttft_ms": "100–5000", "sg_tpot_ms": "10–300", "sg_load": "0.5, 1.0, 1.5, 2.0"},
    "speculation": {"sp_k": "1, 2, 3, 4, 5, 6, 8", "sp_big": "16, 32, 64, 128", "sp_pairs": "1–3"},
    "static_vs_continuous": {"svc_workload": ", ".join(WORKLOADS), "svc_slots": "2–16", "svc_seed": "0–999"},
    "tail": {"ta_long": "0.0, 0.05, 0.1, 0.2", "ta_bursty": "1 or 0", "ta_seed": "0–999",
             "ta_segment": "prompt, tenant, window, none", "ta_metric": "ttft_s, tpot_s, e2e_s"},
    "token_budget": {"tb_budgets": "32, 64, 128, 256, 512, 1024, 2048", "tb_workload": "mixed, short only"},
    "why_batch": {"wb_sizes": "1, 2, 4, 8, 16, 32, 64, 128", "wb_context": "16–512", "wb_steps": "2–16",
                  "wb_repeats": "1–5"},
}





def page(path: str, query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / path), default_timeout=TIMEOUT)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    return at.run()



def as_shown(markdown: str) -> str:
    """What a reader sees of a message: backslash escapes and zero-width spaces removed."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("&#8203;", "")


def messages(at: AppTest) -> list[str]:
    """The Markdown source of every text element on the page."""
    kinds = ("title", "header", "subheader", "markdown", "caption", "warning", "info", "error",
             "success", "toast")
    return [e.value for kind in kinds for e in getattr(at, kind)]


def no_traceback(text: str) -> bool:
    return "Traceback" not in text and "/work/" not in text and str(ROOT) not in text


LABS = [(lab.url_path, lab.path) for lab in LESSON_LABS]


# ----------------------------------------------------------------------------- lab links


@pytest.mark.parametrize("lab_id, path", LABS, ids=[lab_id for lab_id, _ in LABS])
def test_the_table_lists_every_link_key_of_every_lab(lab_env, lab_id, path):
    at = page(path)
    assert not at.exception, [e.message for e in at.exception]
    assert set(at.query_params) == set(LINK_KEYS[lab_id])


@pytest.mark.parametrize("bad", [HUGE, NOT_A_NUMBER])
@pytest.mark.parametrize("lab_id, path", LABS, ids=[lab_id for lab_id, _ in LABS])
def test_a_bad_link_value_is_replaced_with_a_warning(lab_env, lab_id, path, bad):
    keys = LINK_KEYS[lab_id]
    at = page(path, {key: bad for key in keys})
    assert not at.exception, [e.message for e in at.exception]
    warnings = [as_shown(w.value) for w in at.warning]
    for key, allowed in keys.items():
        assert any(f"{key}={bad}" in w and allowed in w for w in warnings), (key, warnings)
        assert at.query_params[key] not in (bad, [bad]), f"{key}: the link keeps the bad value"
    assert all(no_traceback(m) for m in messages(at))


def test_a_link_value_inside_the_range_is_taken_without_a_warning(lab_env):
    at = page("labs/costs/page.py", {"co_long": "512", "co_priority": "prefill_first"})
    assert not at.exception and not at.warning
    assert at.slider(key="co_long").value == 512
    assert at.radio(key="co_priority").value == "prefill_first"


def test_a_multiselect_link_keeps_its_allowed_values(lab_env):
    at = page("labs/knee/page.py", {"kn_values": "2,999,8"})
    assert not at.exception
    assert at.multiselect(key="kn_values").value == [2, 8]
    assert any("kn_values=2,999,8" in as_shown(w.value) for w in at.warning)


# ----------------------------------------------------------------------------- failures


def test_a_failing_measurement_shows_an_error_not_a_traceback(lab_env, monkeypatch):
    def broken(model, *args, peek=False, **kw):
        if peek:
            return None
        raise RuntimeError(f"could not write {ROOT}/engine/runs/results.py")

    monkeypatch.setattr(why_batch, "batch_scaling", broken)
    at = commit_predictions(page("labs/why_batch/page.py"))
    at.button(key="why_batch__run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.error, "the failure is reported on the page"
    assert all(no_traceback(m) for m in messages(at))
    assert any(b.key == "why_batch__run" for b in at.button), "the run button is offered again"


def test_a_failing_lookup_of_stored_results_shows_an_error(lab_env, monkeypatch):
    def broken(model, *args, **kw):
        raise ValueError(f"bad JSON in {ROOT}/results/run-1.json")

    monkeypatch.setattr(why_batch, "batch_scaling", broken)
    at = commit_predictions(page("labs/why_batch/page.py"))
    assert not at.exception, [e.message for e in at.exception]
    assert at.error and all(no_traceback(m) for m in messages(at))


def test_a_playground_engine_failure_shows_an_error_not_a_traceback(lab_env, monkeypatch):
    def broken(self):
        raise RuntimeError(f"engine thread died in {ROOT}/engine/runs/live.py")

    monkeypatch.setattr(PlaygroundRun, "start", broken)
    at = page("playground/page.py")
    try:
        at.button(key="start").click().run()
        assert not at.exception, [e.message for e in at.exception]
        assert at.error, "the failure is reported on the page"
        assert all(no_traceback(m) for m in messages(at))
    finally:
        if "lab_run" in at.session_state:
            at.session_state["lab_run"].stop()


# ----------------------------------------------------------------------------- Markdown


def test_playground_link_values_never_render_as_markdown(lab_env):
    at = page("playground/page.py", INJECTIONS)
    assert not at.exception, [e.message for e in at.exception]
    shown = [as_shown(w.value) for w in at.warning]
    for key, value in INJECTIONS.items():
        assert any(key in w and value in w for w in shown), (key, shown)
    for text in messages(at):
        assert "](http" not in text, text


NASTY = ["[log in](https://evil.example)", "![x](https://evil.example/x.png)", "<https://evil.example>",
         "https://evil.example www.evil.example", "**bold** _it_ `code` ~~gone~~ $x^2$", "# heading",
         "line\n\n- item\n> quote", "back\\slash \\[not a link\\](http://x)", ":red[coloured] :material/home:",
         "max_num_seqs _em_ __strong__ a_*b*_c ä_x_ö"]


@pytest.mark.parametrize("text", NASTY)
def test_plain_text_renders_literally(text):
    html_out = MarkdownIt("commonmark").enable("strikethrough").render(plain(text))
    assert not re.search(r"<(a|img|code|em|strong|s|h\d|ul|ol|li|blockquote)\b", html_out), html_out
    flat = " ".join(text.split())
    shown = html.unescape(re.sub(r"<[^>]+>", "", html_out)).strip()
    assert shown.replace("\u200b", "") == flat
    # a bare address stays text in GFM too (Streamlit autolinks www. and scheme://)
    assert not re.search(r"(?i)(https?:|ftp:)//|www\.", shown), shown
