"""The course: what it teaches and with which examples. No Streamlit."""
