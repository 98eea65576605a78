"""Batching Lab: the Streamlit entry point."""
import streamlit as st

st.set_page_config(page_title="Batching Lab", layout="wide")
st.title("Batching Lab")
st.write("Watch and steer a real LLM serving engine as it batches requests.")
