"""What each view shows, read and computed through backend/: one module per view (`explorer`, `trends`,
`rollout`, `group`, `compare`, `tune`, `resample`, `oracle`) and `shared` for what several views read.

No math here: every function calls the backend function a command also calls, cached with `st.cache_data`
on small hashable arguments. A view's module imports the store's loaders (`app/data.py`) and `shared`,
never another view's module, a view helper or the server.
"""
