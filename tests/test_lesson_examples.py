"""The lessons' worked examples come from code: every {{example:name=text}} marker shows what
analysis/course_numbers.py computes from the course's simulated runs and the engine's constants, the
sentences that compare two of them say the right way round, and every lesson places a picture that exists."""
import functools

import pytest

from course import machines
from course.numbers import machine_of, numbers
from lessons.catalog import BLOCK_BREAK, FOLDER, find_blocks, find_example_numbers, load_lessons, tag_machines
from tests.test_lesson_numbers import written
from ui.calculators import CALCULATOR_IDS
from ui.machine_tags import UNKNOWN, badge_for
from ui.lesson_pictures import PICTURE_IDS

LESSONS, _ = load_lessons()
GLOSSARY_TEXT = (FOLDER / "glossary.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def computed() -> dict:
    return numbers()


def shown(value) -> str:
    return value if isinstance(value, str) else written(value)


def mismatches(items, computed: dict) -> list[str]:
    out = []
    for where, (name, text) in items:
        if name not in computed:
            out.append(f"{where}: no worked-example number named {name!r}")
        elif text != shown(computed[name]):
            out.append(f"{where}: '{text}' but the course computes {name} = '{shown(computed[name])}'")
    return out


def test_every_example_number_is_what_the_code_computes(computed):
    items = [(l.path.name, m) for l in LESSONS for m in find_example_numbers(l.body)]
    items += [("glossary.md", m) for m in find_example_numbers(GLOSSARY_TEXT)]
    assert len(items) >= 60
    assert mismatches(items, computed) == []


def test_a_planted_example_mismatch_is_caught(computed):
    body = next(l.body for l in LESSONS if l.id == "static-vs-continuous")
    planted = body.replace("{{example:static_end_s=", "{{example:static_end_s=9", 1)
    found = mismatches([("planted", m) for m in find_example_numbers(planted)], computed)
    assert len(found) == 1 and "static_end_s" in found[0]
    assert mismatches([("planted", ("no_such_number", "1"))], computed) == \
        ["planted: no worked-example number named 'no_such_number'"]


def test_the_sentences_that_compare_say_it_the_right_way_round(computed):
    n = computed
    # lesson 2: continuous ends sooner, starts everyone sooner, and the long request pays
    assert n["continuous_end_s"] < n["static_end_s"] and n["continuous_tok_s"] > n["static_tok_s"]
    assert n["continuous_ttft_p95_s"] < n["static_ttft_p95_s"]
    assert n["continuous_long_e2e_s"] > n["static_long_e2e_s"]
    assert n["grid_cont_steps"] < n["grid_static_steps"]
    # lesson 3: the unchunked step is the spike, and a chunked step's range runs low to high
    assert 1000 * n["ex3_all_s"] > n["ex3_step_max_ms"] > n["ex3_step_ms"] >= n["ex3_decode_ms"]
    assert n["ex3_chunk_steps"] - 1 < n["ex3_chunk_ratio"] <= n["ex3_chunk_steps"]
    # lesson 5: the busier run waits longer
    assert n["sim_q_95"] > n["sim_q_70"] and n["sim_w_95"] > n["sim_w_70"]
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
    # lesson 7's quiz: short prompts' median near 0.6 s, their p99 near 6 s
    assert 0.4 <= n["tl_short_p50"] <= 0.8 and 4.5 <= n["tl_short_p99"] <= 7.5
    # lesson 2: the first static batch is small, and the queue grows behind it
    assert n["sl_first_batch"] < n["sl_slots"] and n["sl_queue_max"] > n["sl_slots"]
    # lesson 7: the speed-up halves the median, barely moves p99 and leaves long prompts alone
    assert n["tl2_p50"] < 0.6 * n["tl_p50"] and n["tl2_p99"] > 0.75 * n["tl_p99"]
    assert abs(n["tl2_long_p50"] - n["tl_long_p50"]) < 0.05 * n["tl_long_p50"]
    assert n["tl_long_p50"] > n["tl_p99"] / 3 and n["tl_short_p99"] > 3 * n["tl_short_p50"]
    # lesson 8: shortest-job-first lets a long prompt wait longest
    assert n["sv_sjf_oldest_s"] > n["sv_fcfs_oldest_s"] and n["sv_sjf_longest_prompt"] > 512
    # lesson 9: the autoscaler asks only after traffic steps up
    assert n["gw_alarm_s"] is not None and n["gw_alarm_s"] > n["gw_ramp_s"]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_every_lesson_places_a_picture_that_exists(lesson):
    placed = find_blocks(lesson.body, "picture")
    assert placed, f"{lesson.path.name} places no picture"
    assert set(placed) <= set(PICTURE_IDS), f"{lesson.path.name}: unknown {set(placed) - set(PICTURE_IDS)}"
    assert set(find_blocks(lesson.body, "calculator")) <= set(CALCULATOR_IDS)


def test_the_picture_check_can_fail():
    assert find_blocks("text only\n", "picture") == []
    assert find_blocks("{{picture:no_such}}\n", "picture") == ["no_such"]
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
        wanted = {machine_of(name) for name, _ in find_example_numbers(block)} - {machines.ANY}
        if not wanted:
            continue
        tagged = tag_machines(block, badge)
        named = {m for m in wanted - {None}
                 if machines.badge(m) in tagged or machines.badge(m, machines.short(m)) in tagged}
        if None in wanted or named != wanted:
            out.append(block[:80])
    return out


def test_every_worked_example_number_names_its_machine():
    """Every {{example:...}} a lesson quotes comes from a named machine (analysis/course_numbers.machine_of:
    the course's recorded CPU, a named GPU's roofline, a supposed machine) or from none (a setting, a model's
    shape), and the page shows a badge naming it beside the block or the number."""
    names = {name for l in LESSONS for name, _ in find_example_numbers(l.body)}
    assert [n for n in sorted(names) if machine_of(n) is None] == []
    for lesson in LESSONS:
        assert untagged_blocks(lesson.body) == [], lesson.id
    six = next(l for l in LESSONS if l.id == "batch-policy")
    assert machines.badge("a100-80gb:llama-3.1-8b") in tag_machines(six.body, badge_for)


def test_a_number_with_no_machine_is_caught():
    body = next(l.body for l in LESSONS if l.id == "batch-policy")
    planted = body.replace("{{example:kn_tok_s_16=", "{{example:kn_new_number=", 1)
    lost = lambda name: None if name == "kn_new_number" else machine_of(name)     # noqa: E731
    assert len(untagged_blocks(planted, lost)) == 1
    assert UNKNOWN in tag_machines(planted, functools.partial(badge_for, machine_of=lost))
    tagged = tag_machines("{{example:kn_tok_s_8=772}} here and {{example:static_end_s=22.1}} there", badge_for)
    assert machines.badge("a100-80gb:llama-3.1-8b", "A100 roofline") in tagged
    assert machines.badge(machines.RECORD, "recorded CPU") in tagged, "two machines in one block: a badge each"
