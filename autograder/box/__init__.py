"""Where a student's notebook runs when it is graded: the sandbox, hardened execution and per-kernel limits."""
