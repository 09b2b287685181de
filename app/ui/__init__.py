"""View helpers: what the views draw with, and nothing they compute.

Figures are pure functions of arrays and frames (`charts`, `heatmaps`, `strip_figures`, with the colour
`scales` and number formats of `fmt`; tests call them without a server); `text` makes untrusted text safe
for markdown; `widgets` are the inputs mirrored to the URL (estimator form, channel picker, scale controls);
`panels` are pieces of screens several views share; `cliff_marker` and `monitor_panel` draw one backend
result each. They never import the server (`app/server/`) or the access settings (`app/access.py`).
"""
