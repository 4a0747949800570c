"""repro's run side: server lifecycle, live audit during a run, oracle client, gates, teardown."""
