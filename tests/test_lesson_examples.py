"""The lessons' worked examples come from code: every {{example:name=text}} marker shows what
analysis/course_numbers.py computes from the course's simulated runs and the engine's constants, the
sentences that compare two of them say the right way round, and every lesson places a picture that exists."""
import pytest

from analysis.course_numbers import numbers
from lessons.catalog import FOLDER, find_blocks, find_example_numbers, load_lessons
from tests.test_lesson_numbers import written
from ui.calculators import CALCULATOR_IDS
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
    # lesson 1: the sweep stops before the curve flattens
    assert n["knee_b"] == 64 and n["ninety_b"] > 64
    # lesson 5: the busier run waits longer
    assert n["sim_q_95"] > n["sim_q_70"] and n["sim_w_95"] > n["sim_w_70"]
    # lesson 6: the TPOT target picks a setting below the knee, the TTFT target one below that
    assert n["kn_slo_best"] < n["knee"] and n["kn_ttft_best"] < n["kn_slo_best"]
    # lesson 6's quiz reads the sweep: TTFT more than halves from 8 to 64 slots; 32 is the last within 40 ms
    assert n["kn_ttft_64"] < n["kn_ttft_8"] / 2 and n["kn_tpot_32"] <= 40 < n["kn_tpot_64"]
    assert 200 <= n["kn_tpot_256"] <= 350                     # "a token every quarter of a second or so"
    # "from about 14 s to under 7 s, not to 2"; TPOT "doubled and doubled again"; 16 "with room to
    # spare"; 32 "in the thirties", 64 "roughly doubles it"; "64, the knee"; "256, the most throughput"
    assert round(n["kn_ttft_8"]) == 14 and n["kn_ttft_64"] < 7 and round(n["kn_ttft_8"] / 8) == 2
    assert 3.5 <= n["kn_tpot_64"] / n["kn_tpot_8"] <= 4.5 and n["kn_tpot_16"] <= 0.75 * 40
    assert 30 <= n["kn_tpot_32"] < 40 and 1.7 <= n["kn_tpot_64"] / n["kn_tpot_32"] <= 2.3 and n["knee"] == 64
    tok_s = {v: int(n[f"kn_tok_s_{v}"].replace(",", "")) for v in (8, 16, 32, 64, 128, 256)}
    assert max(tok_s, key=tok_s.get) == 256
    # lesson 6's text: the knee "within 10% of the best"; doubling it "adds almost nothing" while TPOT "doubles"
    assert tok_s[64] >= 0.9 * tok_s[256] and tok_s[128] < 1.05 * tok_s[64]
    assert 1.8 <= n["kn_tpot_128"] / n["kn_tpot_64"] <= 2.2
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
