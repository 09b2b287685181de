"""Core data: errors, the padded rollout batch and its field names, chunk plans, small plumbing.
The lowest layer: it imports nothing else from backend."""
