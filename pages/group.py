"""group view."""

import streamlit as st

st.title("group")
