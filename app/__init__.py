"""Credit Lens's Streamlit app: the views over a store and the server that serves them. No math here: every
number a view shows comes from a backend/ function that a command also calls. The views themselves (one
script each) are in the top-level `pages/`; app/ holds what they share.

    main.py         the script Streamlit runs: page config, the cookie check, navigation, the shared selection
    navigation.py   the views in order (script, title, url path, icon): one list for main, links and warm-up
    keys.py         every URL query parameter and session_state key, named once
    state.py        the shared selection (run, rollout, token classes) and the URL it is mirrored to
    data.py         the store for the views: one handle per process, cached loaders, invalidation
    access.py       what this server allows a session: read-only mode, import roots, job limits
    actions.py      what a view changes in the store (import, main channel, token classes, delete), checked
    jobs.py         model jobs in a thread (resampling, model credit), checked
    view_data/      each view's numbers through backend/, one module per view and `shared`
    ui/             view helpers: figures, widgets mirrored to the URL, panels several views share
    server/         `creditlens app` (launch), the ASGI app behind its token gate (asgi, gate, auth), warm-up

Layers (tests/test_architecture.py): nothing imports a view (pages/); a view reaches backend/ only through
app/; a view's data module imports only data.py and `shared`; ui/ never imports server/ or access.py; the
server imports no view code, and in app/ only main.py imports it.
"""
