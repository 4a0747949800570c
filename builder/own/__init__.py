"""The repro that runs: its release, its files, what it states of itself."""
