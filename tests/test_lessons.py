"""Lesson texts, quizzes and glossary: they parse, their links resolve, search works."""
import shutil

import pytest

from lessons.catalog import (LAB_IDS, FOLDER, find_links, load_glossary, load_lessons,
                             plain_text, render_links, search)

LESSONS, ERRORS = load_lessons()
GLOSSARY = load_glossary()
GOOD = (FOLDER / "01-why-batch.md").read_text(encoding="utf-8")


def test_every_lesson_parses():
    assert ERRORS == []
    assert len(LESSONS) == len(list(FOLDER.glob("[0-9][0-9]-*.md")))
    assert [l.order for l in LESSONS] == [int(l.path.name[:2]) for l in LESSONS], "each file's number is its order"
    assert [l.order for l in LESSONS][:10] == list(range(1, 11))
    assert len({l.id for l in LESSONS}) == len(LESSONS)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_front_matter(lesson):
    assert lesson.title and lesson.summary and "\n" not in lesson.summary
    assert lesson.labs and set(lesson.labs) <= set(LAB_IDS)
    assert lesson.glossary
    assert 2 <= len(lesson.quiz) <= 3
    assert not lesson.body.lstrip().startswith("---")


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_lesson_shape(lesson):
    words = len(plain_text(lesson.body).split())
    assert 750 <= words <= 1450, f"{lesson.path.name}: {words} words"
    assert 5 <= lesson.minutes <= 10
    assert "## The claim" in lesson.body and "## Try it in the lab" in lesson.body
    assert "$" in lesson.body, "every lesson carries at least one formula"
    assert lesson.body.count("$$") % 2 == 0, "unbalanced display math"
    for para in lesson.body.split("\n\n"):
        assert para.replace("$$", "").count("$") % 2 == 0, f"{lesson.path.name}: stray $ in {para[:60]!r}"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_links_resolve(lesson):
    links = find_links(lesson.body)
    gloss = {i for k, i in links if k == "glossary"}
    labs = {i for k, i in links if k == "lab"}
    lessons = {i for k, i in links if k == "lesson"}
    assert gloss <= set(GLOSSARY), f"{lesson.path.name}: unknown glossary ids {gloss - set(GLOSSARY)}"
    assert set(lesson.glossary) <= set(GLOSSARY), f"{lesson.path.name}: front matter {set(lesson.glossary) - set(GLOSSARY)}"
    assert gloss <= set(lesson.glossary), f"{lesson.path.name}: linked but not listed {gloss - set(lesson.glossary)}"
    assert labs <= set(LAB_IDS)
    assert labs & set(lesson.labs), f"{lesson.path.name}: body links none of its front-matter labs"
    assert lessons <= {l.id for l in LESSONS}


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_quiz_has_one_right_answer(lesson):
    for q in lesson.quiz:
        assert q.question.strip() and q.explanation.strip()
        assert isinstance(q.answer, int) and 0 <= q.answer < len(q.choices)
        assert len(q.choices) >= 2 and len(set(q.choices)) == len(q.choices)


def test_glossary():
    assert len(GLOSSARY) >= 25
    lesson_ids = {l.id for l in LESSONS}
    for term in GLOSSARY.values():
        assert term.term and term.definition
        assert set(term.see) <= lesson_ids, f"{term.id}: unknown lessons {set(term.see) - lesson_ids}"
        for kind, ident in find_links(term.definition):
            assert (kind == "glossary" and ident in GLOSSARY) or (kind == "lesson" and ident in lesson_ids)
    for need in ["ttft", "tpot", "itl", "e2e", "queue-time", "goodput", "throughput", "slo", "prefill",
                 "decode", "kv-cache", "kv-block", "preemption", "chunked-prefill", "token-budget",
                 "max-num-seqs", "static-batching", "continuous-batching", "dynamic-batching",
                 "utilization", "littles-law", "mm1", "head-of-line-blocking", "percentile", "knee",
                 "fair-queueing", "edf", "sjf", "starvation", "roofline", "memory-bound", "tenant",
                 "admission-control"]:
        assert need in GLOSSARY, need


@pytest.mark.parametrize("bad, problem", [
    ("no front matter here\n", "missing front matter"),
    (GOOD.replace("title: Why batch\n", ""), "missing 'title'"),
    (GOOD.replace("    answer: 1\n", "    answer: 7\n", 1), "out of range"),
    (GOOD.replace("    answer: 1\n", "    answer: [0, 1]\n", 1), "exactly one"),
    (GOOD.replace("labs: [why_batch]", "labs: [why_batch"), "bad YAML"),
    (GOOD.replace("labs: [why_batch]", "labs: [no_such_lab]"), "unknown lab"),
    ("---\n" + GOOD[4:].replace("\n---\n", "\n", 1), "not closed"),
    (GOOD.replace("    explanation: \"A batch-1 decode step", "    because: \"A batch-1 decode step"), "missing explanation"),
    (GOOD.replace('      - text: "{= 1000 / c :,.0f}"\n', '      - text: "{= 9 * t0 / c :.0f}"\n'), "not unique"),
    (GOOD.replace('        why: "That is the ceiling itself', '        because: "That is the ceiling itself'), "need a 'why'"),
    (GOOD.replace('      - text: "{= t0 / c :.0f}"\n', '      - text: "{= t0 / c :.0f}"\n        why: "It is."\n'),
     "takes no 'why'"),
    (GOOD.replace("why_batch.step_ms_1: 72, ", ""), "'measured.example' must give a number"),
    (GOOD.replace('t0: "why_batch.step_ms_1 - c"', 't0: "why_batch.step_ms_1 - k"'), "unknown name 'k'"),
    (GOOD.replace('t0: "why_batch.step_ms_1 - c"', 't0: "__import__(1)"'), "only arithmetic"),
    (GOOD.replace("why_batch.step_ms_8: 104}", "why_batch.step_ms_8: 60}"), "example values do not work"),
    (GOOD.replace('      without: "Suppose a decode step', '      instead: "Suppose a decode step'), "'with' and 'without'"),
    (GOOD.replace("{why_batch.step_ms_1}", "{no_such_lab.step_ms_1}"), "unknown lab id(s) ['no_such_lab']"),
    (GOOD.replace('      - text: "{= t0 / c :.0f}"', '      - "{= t0 / c :.0f}"'), "needs a non-empty 'text'"),
    (GOOD.replace("order: 1\n", "order: first\n"), "'order' must be a whole number"),
])
def test_broken_lesson_is_reported_and_others_load(tmp_path, bad, problem):
    for p in FOLDER.glob("0[2-4]-*.md"):
        shutil.copy(p, tmp_path / p.name)
    (tmp_path / "01-broken.md").write_text(bad, encoding="utf-8")
    lessons, errors = load_lessons(tmp_path)
    assert [l.order for l in lessons] == [2, 3, 4]
    assert len(errors) == 1
    assert errors[0].path.name == "01-broken.md"
    assert "01-broken.md" in errors[0].message and problem in errors[0].message, errors[0].message


def test_search_finds_glossary_terms_by_name():
    for term in GLOSSARY.values():
        hits = search(term.term, LESSONS, GLOSSARY)
        assert hits and hits[0].kind == "glossary" and hits[0].id == term.id, term.term
        hits = search(term.term.upper(), LESSONS, GLOSSARY)
        assert (hits[0].kind, hits[0].id) == ("glossary", term.id)


def test_search_ranking_and_short_queries():
    assert search("", LESSONS, GLOSSARY) == [] and search("q", LESSONS, GLOSSARY) == []
    assert search(" t ", LESSONS, GLOSSARY) == []
    hits = search("batch", LESSONS, GLOSSARY)
    kinds = [h.kind for h in hits]
    first_lesson = kinds.index("lesson")
    assert all(k == "glossary" for k in kinds[:first_lesson])
    assert hits[first_lesson].title == "Why batch"
    hits = search("little", LESSONS, GLOSSARY)
    assert hits[0].id == "littles-law" and any(h.kind == "lesson" and h.id == "queueing" for h in hits)
    assert all(h.snippet for h in hits)
    assert "glossary#" not in " ".join(h.snippet for h in search("ttft", LESSONS, GLOSSARY))


def test_render_links():
    body = "See [TTFT](glossary#ttft), [the lab](lab:why_batch) and [lesson 4](lesson:latency-metrics)."
    out = render_links(body, lambda i: f"/glossary#{i}", {"why_batch": "/lab_why_batch"})
    assert out == "See [TTFT](/glossary#ttft), [the lab](/lab_why_batch) and lesson 4."
    out = render_links(body, {}, lambda i: None, {"latency-metrics": "/lesson_4"})
    assert out == "See TTFT, the lab and [lesson 4](/lesson_4)."
    for lesson in LESSONS:
        out = render_links(lesson.body, lambda i: f"/g#{i}", lambda i: f"/{i}", lambda i: f"/l/{i}")
        assert "glossary#" not in out and "(lab:" not in out and "(lesson:" not in out


OUTSIDE = ("vLLM", "Kubernetes", "kubelet", "TGI", "Triton", "HorizontalPodAutoscaler", "ReplicaSet", "SGLang")


def unsourced(glossary) -> list[str]:
    """Terms whose definition makes a claim about an outside system but cites no documentation."""
    return [t.id for t in glossary.values() if any(n in t.definition for n in OUTSIDE) and not t.sources]


def test_every_claim_about_an_outside_system_cites_its_source(tmp_path):
    assert unsourced(GLOSSARY) == []
    planted = tmp_path / "glossary.md"
    planted.write_text("## Thing {#thing}\nvLLM does this.\n", encoding="utf-8")
    assert unsourced(load_glossary(planted)) == ["thing"]
