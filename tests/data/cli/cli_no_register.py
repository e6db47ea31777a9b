"""A module that is importable but is not a planloom plugin (it has no `register`)."""

VALUE = 1
