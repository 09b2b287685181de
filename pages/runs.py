"""runs view."""

import streamlit as st

st.title("runs")
