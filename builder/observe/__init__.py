"""Observers: one module per kind of fact, shared by build, `verify --host` and launch."""
