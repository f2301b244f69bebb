"""Isolation only: where a student's notebook runs when it is graded (the sandbox, seccomp, per-kernel limits, a
box's uid from take to release and the places it may write, the check that the box trusts nothing it should not,
the undertaker of what a kernel leaves behind)."""
