"""`repro restore`: make on this machine what a verified bundle's lock pins, so it can launch.

One module per kind of pin: `python` (the serving environment from the locked wheel artifacts),
`models` (regenerated, or fetched from a hub at the pinned revision), `sources` (cloned at the
pinned commit, patches applied). Each step is idempotent (what already holds is left alone and
said so) and atomic (built in a temporary sibling, checked against the lock, then renamed into
place: a kill at any point leaves the previous state or nothing, never something that holds).
"""
