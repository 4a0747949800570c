"""What lets a bundle run where repro never was: its launcher, its README and its tools."""
