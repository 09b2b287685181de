"""compare view."""

import streamlit as st

st.title("compare")
