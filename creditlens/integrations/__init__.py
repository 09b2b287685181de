"""Recorders that run inside a trainer and write what Credit Lens reads (`creditlens.integrations.trl`).

Each is imported by name (`from creditlens.integrations import trl`): importing this package imports no
trainer library.
"""
