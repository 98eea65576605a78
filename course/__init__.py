"""The course's content, no Streamlit: what the lessons and labs hold and ask, read by the pages."""
