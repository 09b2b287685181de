"""oracle view."""

import streamlit as st

st.title("oracle")
