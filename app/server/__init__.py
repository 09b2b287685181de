"""The process that serves the views, and who gets in.

`launch` is `creditlens app` (options, access token, store preparation, the `streamlit run` command; `Server`
for the browser tests and the bench); `asgi` is the script Streamlit serves: the views' entry point
(`app/main.py`) behind the token gate (`gate`, with the token and cookie checks of `auth`) and the
warm-up (`warmup`). In app/ only the entry point imports from here (its cookie check, `auth`); the server
imports no view, view helper or view data module (tests/test_architecture.py).
"""
