"""The lessons' worked examples come from code: every {{number:example.NAME}} marker names a number that
course/numbers.py computes from the course's simulated runs and the engine's constants, the sentences
that compare two of them say the right way round, every number names its machine, every lesson places a
picture that exists, and a lesson with any other marker (an old one, a misspelt one) does not load."""
import functools

import pytest

from course import machines
from course.examples import COURSE_MODEL, SHORT_LONG_SLOTS
from course.numbers import machine_of, numbers, on_step_model
from engine.core.step_model import StepModel
from lessons.catalog import FOLDER, load_glossary, load_lessons, parse_lesson
from lessons.markers import BLOCK_BREAK, find_blocks, find_example_numbers, render_numbers, tag_machines
from ui.calculators import CALCULATOR_IDS
from ui.machine_tags import UNKNOWN, badge_for
from ui.lesson_pictures import PICTURE_IDS

LESSONS, _ = load_lessons()
GLOSSARY_TEXT = (FOLDER / "glossary.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def computed() -> dict:
    return numbers()


def unknown_names(items, computed: dict) -> list[str]:
    return [f"{where}: no worked-example number named {name!r}" for where, name in items if name not in computed]


def test_every_example_number_is_one_the_code_computes(computed):
    items = [(l.path.name, name) for l in LESSONS for name in find_example_numbers(l.body)]
    assert len(items) >= 60
    assert unknown_names(items, computed) == []
    glossary = [("glossary.md", name) for name in find_example_numbers(GLOSSARY_TEXT)]
    assert glossary and all(g in computed for _, g in glossary)
    assert "…" not in "".join(t.definition for t in load_glossary().values()), "the glossary quotes only settings"


def test_an_unknown_example_name_is_caught(computed):
    body = next(l.body for l in LESSONS if l.id == "static-vs-continuous")
    planted = body.replace("{{number:example.static_end_s}}", "{{number:example.static_end_secs}}", 1)
    assert planted != body
    found = unknown_names([("planted", name) for name in find_example_numbers(planted)], computed)
    assert found == ["planted: no worked-example number named 'static_end_secs'"]
    assert "{{number:" not in render_numbers(body, computed)


@pytest.mark.parametrize("marker", ["{{example:static_end_s=5.1}}", "{{lab:slo_goodput.RATES=1, 2, 4 and 8}}",
                                    "{{picture:queue_growth}}", "{{calculator:mm1}}", "{{predict:knee}}",
                                    "{{number:static_end_s}}", "{{place:widget:mm1}}", "{{number:lab.x.Y:pct}}"])
def test_an_old_or_unknown_marker_fails_the_lesson(tmp_path, marker):
    """Only {{number:...}} and {{place:...}} are read; anything else between double braces is refused at load
    with the marker named, so no lesson shows a marker to its reader."""
    good = next(l for l in LESSONS if l.id == "queueing").path.read_text(encoding="utf-8")
    path = tmp_path / "05-queueing.md"
    path.write_text(good, encoding="utf-8")
    parse_lesson(path)
    path.write_text(good + f"\nA new paragraph with {marker} in it.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown marker"):
        parse_lesson(path)


def test_a_picture_must_stand_on_its_own_line(tmp_path):
    good = next(l for l in LESSONS if l.id == "queueing").path.read_text(encoding="utf-8")
    path = tmp_path / "05-queueing.md"
    path.write_text(good.replace("{{place:picture:queue_growth}}", "See {{place:picture:queue_growth}}"),
                    encoding="utf-8")
    with pytest.raises(ValueError, match="queue_growth"):
        parse_lesson(path)


def test_the_sentences_that_compare_say_it_the_right_way_round(computed):
    n = computed
    # lesson 2's slot grid: continuous takes fewer steps (its run is checked on every model below)
    assert n["grid_cont_steps"] < n["grid_static_steps"]
    # lesson 3: the unchunked step is the spike, and a chunked step's range runs low to high
    assert 1000 * n["ex3_all_s"] > n["ex3_step_max_ms"] > n["ex3_step_ms"] >= n["ex3_decode_ms"]
    assert n["ex3_chunk_steps"] - 1 < n["ex3_chunk_ratio"] <= n["ex3_chunk_steps"]
    # lesson 6 (the A100's sweep): a decode-dominated workload; TPOT "hardly moves" up to 64; the knee below
    # the largest setting, past the ridge; the next setting adds under a tenth while TPOT grows; the TPOT
    # target picks a setting below the knee and the TTFT target one at most that; the quiz: TTFT keeps
    # falling from 256 to 512 while throughput grows by under a tenth
    tok_s = {v: int(str(n[f"kn_tok_s_{v}"]).replace(",", "")) for v in (16, 32, 64, 128, 256, 512)}
    assert n["kn_out_per_prompt"] >= 4
    assert n["kn_tpot_64"] <= 1.15 * n["kn_tpot_16"]
    assert n["knee"] < 512 and n["kn_knee_share"] >= 90 and n["knee"] > n["kn_gpu_ridge_b"]
    assert n["kn_after_gain"] < 10 and n["kn_tpot_512"] > 1.5 * n["kn_tpot_256"]
    assert n["kn_slo_best"] < n["knee"] and n["kn_ttft_best"] <= n["kn_slo_best"]
    assert n["kn_ttft_512"] < n["kn_ttft_256"] and tok_s[512] < 1.1 * tok_s[256]


# Lessons 2, 4, 5, 7, 8 and 9 run on the learner's own step model: their sentences must hold on any machine, so they
# are checked on the recorded two-core fp32 model, on this machine's own, and on one fifty times faster
# than the record (a GPU's order of speed). A sentence whose outcome can go either way is worded by code
# (gw_asks, gp_verdict, sl_long_verdict, tl_long_verdict) and not checked here.
FASTER = StepModel(fixed_ms=COURSE_MODEL.fixed_ms / 50, knots=(), token_ms=(COURSE_MODEL.token_ms[0] / 50,),
                   sample_ms=0.0, decode_read_ms=COURSE_MODEL.decode_read_ms / 50, prefill_pair_ms=0.0,
                   label="the recorded model, fifty times faster")


@pytest.fixture(scope="module", params=["recorded", "this machine", "fifty times faster"])
def on_model(request) -> dict:
    from ui.calculators import learner_step_model
    model = {"recorded": COURSE_MODEL, "fifty times faster": FASTER}.get(request.param) or learner_step_model()
    return on_step_model(model)


def test_the_sentences_on_the_learners_model_hold_on_any_machine(on_model):
    check_learner_sentences(on_model)


def check_learner_sentences(n: dict) -> None:
    # lesson 2: continuous ends sooner and starts everyone sooner, its slots are used more but not all (arrivals
    # come too slowly to fill them); the first static batch is small, holds the long one and a short one at
    # least, and the queue grows behind it (the long request's way round is worded: sl_long_verdict)
    assert n["continuous_end_s"] < n["static_end_s"] and n["continuous_tok_s"] > n["static_tok_s"]
    assert n["continuous_ttft_p95_s"] < n["static_ttft_p95_s"]
    assert n["static_share"] < n["continuous_share"] < 100
    assert 2 <= n["sl_first_batch"] < SHORT_LONG_SLOTS < n["sl_queue_max"]
    # lesson 4: the SLO set from the machine's lone request tells requests apart: some meet it, some do not
    assert 0 < n["gp_share"] < 100 and n["slo_ttft_s"] > 0 and n["slo_tpot_ms"] > 0
    # lesson 5: the busier run waits longer; a request's own service is longer than 1/mu (slots share the steps)
    assert n["sim_q_95"] > n["sim_q_70"] and n["sim_w_95"] > n["sim_w_70"] and n["sim_q_ratio"] > 1
    assert n["sim_service_ratio"] > 1 and n["sim_q_70"] > 0
    # lesson 7: the speed-up halves the median and barely moves p99 (what it did to the long prompts is worded:
    # tl_long_verdict); the long prompts' median is a large part of the p99, and the short prompts' p99 far above their median (the quiz asks why)
    assert n["tl2_p50"] < 0.6 * n["tl_p50"] and n["tl2_p99"] > 0.75 * n["tl_p99"]
    assert n["tl_long_p50"] > n["tl_p99"] / 3 and n["tl_short_p99"] > 3 * n["tl_short_p50"]
    # lesson 8: shortest-job-first lets a long prompt wait longest, below capacity
    assert n["sv_sjf_oldest_s"] > n["sv_fcfs_oldest_s"] and n["sv_sjf_longest_prompt"] > 512
    # lesson 9: "until a third one starts": the new traffic needs three; the replicas fall behind
    assert n["gw_needed"] == 3 and n["gw_excess"] > 0


def test_a_sentence_that_does_not_hold_is_caught(computed):
    wrong = {**computed, "sv_sjf_oldest_s": computed["sv_fcfs_oldest_s"]}
    with pytest.raises(AssertionError):
        check_learner_sentences(wrong)


def test_the_autoscaler_words_each_way():
    """gw_asks says when the autoscaler asked, whichever way the run came out."""
    from course.numbers import autoscaler_words
    assert computed_words() == autoscaler_words(55, 81) == "asks at 55 s, 15 s after the step up"
    assert autoscaler_words(30, 81).endswith("before the step up: the traffic's own bursts were enough")
    assert autoscaler_words(None, 81).startswith("never asks in the run's 81 s")


def test_the_long_request_words_each_way():
    """sl_long_verdict says whether lesson 2's long request took longer under continuous batching, either way."""
    from course.numbers import long_request_words
    assert long_request_words(12.3, 16.4, 500) == "longer than the 12.3 s it took under static batching"
    assert long_request_words(12.3, 11.9, 500).startswith(
        "shorter all the same than the 12.3 s it took under static batching, where it first waited 500 ms")


def test_the_long_prompts_words_each_way():
    """tl_long_verdict says what lesson 7's shorter short prompts did to the long prompts' median, either way."""
    from course.numbers import long_prompts_words
    assert long_prompts_words(7.39, 7.2, 2.0, 0.9) == "the people with long documents saw almost no change"
    assert long_prompts_words(7.39, 6.7, 2.0, 0.9) == (
        "the people with long documents waited 9% less, while the median of all requests fell 55%")
    assert long_prompts_words(7.39, 8.2, 2.0, 0.9) == (
        "the people with long documents waited 11% longer, while the median of all requests fell 55%")
    assert long_prompts_words(float("nan"), 8.2, 2.0, 0.9) == "the run had too few requests to compare the two"


def test_the_goodput_words_each_way():
    """gp_verdict says how lesson 4's run met its SLO, whichever way it came out."""
    from course.numbers import goodput_words
    run = {"requests": 60, "ttft_ok": 60, "both_ok": 23, "slo_ttft_s": 2.0, "slo_tpot_s": 0.14}
    assert goodput_words(run).startswith("all 60 requests start within 2 s, but only 23 of those also stream within "
                                         "140 ms a token: each newcomer's prompt")
    assert goodput_words({**run, "ttft_ok": 59}).startswith("59 of the 60 requests start within 2 s, but only 23")
    assert goodput_words({**run, "both_ok": 60, "slo_tpot_s": 0.0031}) == (
        "all 60 requests start within 2 s, and every one of those also streams within 3.1 ms a token")


def computed_words() -> str:
    return numbers()["gw_asks"]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_every_lesson_places_a_picture_that_exists(lesson):
    placed = find_blocks(lesson.body, "picture")
    assert placed, f"{lesson.path.name} places no picture"
    assert set(placed) <= set(PICTURE_IDS), f"{lesson.path.name}: unknown {set(placed) - set(PICTURE_IDS)}"
    assert set(find_blocks(lesson.body, "calculator")) <= set(CALCULATOR_IDS)


def test_the_picture_check_can_fail():
    assert find_blocks("text only\n", "picture") == []
    assert find_blocks("{{place:picture:no_such}}\n", "picture") == ["no_such"]
    assert "no_such" not in PICTURE_IDS


def test_every_picture_is_placed_somewhere():
    placed = {p for l in LESSONS for p in find_blocks(l.body, "picture")}
    assert placed == set(PICTURE_IDS)


# ----------------------------------------------------------------------------- every number names its machine

def untagged_blocks(body: str, machine_of=machine_of) -> list[str]:
    """The paragraphs and tables of `body` that quote a number of some machine and, as the page shows them,
    carry no badge naming it (a badge beside each number, or one after the block)."""
    badge = functools.partial(badge_for, machine_of=machine_of)
    out = []
    for block in BLOCK_BREAK.split(body):
        wanted = {machine_of(name) for name in find_example_numbers(block)} - {machines.ANY}
        if not wanted:
            continue
        tagged = tag_machines(block, badge)
        named = {m for m in wanted - {None}
                 if machines.badge(m) in tagged or machines.badge(m, machines.short(m)) in tagged}
        if None in wanted or named != wanted:
            out.append(block[:80])
    return out


def test_every_worked_example_number_names_its_machine():
    """Every {{number:example...}} a lesson quotes comes from a named machine (course/numbers.machine_of:
    the course's recorded CPU, a named GPU's roofline, a supposed machine) or from none (a setting, a model's
    shape), and the page shows a badge naming it beside the block or the number."""
    names = {name for l in LESSONS for name in find_example_numbers(l.body)}
    assert [n for n in sorted(names) if machine_of(n) is None] == []
    for lesson in LESSONS:
        assert untagged_blocks(lesson.body) == [], lesson.id
    six = next(l for l in LESSONS if l.id == "batch-policy")
    assert machines.badge("a100-80gb:llama-3.1-8b") in tag_machines(six.body, badge_for)


def test_a_number_with_no_machine_is_caught():
    body = next(l.body for l in LESSONS if l.id == "batch-policy")
    planted = body.replace("{{number:example.kn_tok_s_16}}", "{{number:example.kn_new_number}}", 1)
    assert planted != body
    lost = lambda name: None if name == "kn_new_number" else machine_of(name)     # noqa: E731
    assert len(untagged_blocks(planted, lost)) == 1
    assert UNKNOWN in tag_machines(planted, functools.partial(badge_for, machine_of=lost))
    tagged = tag_machines("{{number:example.kn_tok_s_16}} here and {{number:example.lc_ttft_s}} there", badge_for)
    assert machines.badge("a100-80gb:llama-3.1-8b", "A100 roofline") in tagged
    assert machines.badge(machines.RECORD, "recorded CPU") in tagged, "two machines in one block: a badge each"


def test_blocks_of_one_machine_in_a_row_share_one_badge():
    """A badge after every paragraph of one worked example read as noise (four alike in lesson 1): a
    run of blocks of one machine gets one badge after its last; a heading or another machine ends it."""
    fake = {"a": "[A]", "b": "[B]", "n": ""}
    badge = lambda name, short=False: fake[name[0]]      # noqa: E731
    text = ("## S\n\nx {{number:example.a1}}\n\nno number\n\ny {{number:example.a2}}\n\nafter\n\n"
            "z {{number:example.b1}}\n\n## T\n\nw {{number:example.a3}}")
    assert BLOCK_BREAK.split(tag_machines(text, badge)) == [
        "## S", "x {{number:example.a1}}", "no number", "y {{number:example.a2}}", "[A]", "after",
        "z {{number:example.b1}}", "[B]", "## T", "w {{number:example.a3}}", "[A]"]
    why_batch = next(l.body for l in LESSONS if l.id == "why-batch")
    supposed = machines.badge(machines.SUPPOSED_1)
    assert tag_machines(why_batch, badge_for).count(supposed) < \
        sum(supposed in tag_machines(b, badge_for) for b in BLOCK_BREAK.split(why_batch))
