"""The views, one script each (Streamlit pages, the project's top-level `pages/`): each reads like a
description of its screen.

`app/main.py` runs them through `st.navigation`, in the order and with the url paths of `app/navigation.py`;
nothing imports them. A view draws with the helpers in `app/ui/`, reads its numbers from its module in
`app/view_data/` (and from `shared` there, or the store's loaders in `app/data.py`), and changes the store
only through `app/actions.py` and `app/jobs.py`.
"""
