"""tune view."""

import streamlit as st

st.title("tune")
