"""Home: what Batching Lab is, where to start, what each lab shows."""
import streamlit as st

from lessons.catalog import load_lessons
from lessons.pages import pages as lesson_pages
from course.registry import LABS

st.title("Batching Lab")
st.markdown(
    "An LLM server is fastest when many requests share each step of the model, and slowest "
    "for the person whose request has to wait for a seat. **Batching Lab** lets you watch "
    "and steer that trade-off on a real engine: SmolLM2-135M running on this machine, with a "
    "scheduler that batches requests the way vLLM does. Every chart is drawn from what the "
    "engine actually did, step by step.")

st.header("Where to start")
st.markdown(
    "1. **New to batching?** Read the lessons in order: each one is short, ends with a quiz, "
    "and points at the lab that shows its idea.\n"
    "2. **Want to see it move?** Open the **Playground**: it starts on the *Interactive chat* "
    "preset, sized to this machine. Press **Start**, drag `max_num_seqs` while it runs, then try "
    "another preset.\n"
    "3. **Measuring?** A Playground run downloads as the same `requests.csv` and `steps.csv` "
    "the command line writes (`python -m engine run`), and the Playground's page address "
    "reproduces its setup.")
for lab in LABS[:1]:
    st.page_link(lab.path, label=f"Open the {lab.title}", icon=lab.icon)

# Every lesson and lab as a link, all of them on the page: on a phone the navigation folds most
# of them away ("View 14 more"), so Home lists them in full.
lessons, _errors = load_lessons()
if lessons:
    st.header("Lessons")
    links = {page.title: page for page in lesson_pages()}
    for lesson in sorted(lessons, key=lambda l: l.order):
        title = f"{lesson.order} · {lesson.title}"
        if title in links:
            st.page_link(links[title], label=f"{lesson.order}. {lesson.title} · {lesson.minutes} min")
        else:
            st.markdown(f"**{lesson.order}. {lesson.title}** · {lesson.minutes} min")
        st.caption(lesson.summary)

st.header("The labs")
for lab in LABS:
    st.page_link(lab.path, label=lab.title, icon=lab.icon)
    st.caption(lab.shows)

st.header("What you are looking at")
st.markdown(
    "- **Engine step**: one forward pass of the model over every request in the batch: a "
    "chunk of a prompt (prefill) or one new token (decode) for each.\n"
    "- **Static batching** forms a batch and runs it to the end; **continuous batching** lets "
    "requests join and leave at every step.\n"
    "- **TTFT** is how long a user waits for the first token; **TPOT** is the gap between the "
    "tokens after it; **goodput** counts only requests that met both targets.")
