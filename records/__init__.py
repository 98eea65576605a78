"""What a learner does, kept in one SQLite file: no Streamlit here (ui/learner.py is the page's side)."""
