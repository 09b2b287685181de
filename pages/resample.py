"""resample view."""

import streamlit as st

st.title("resample")
