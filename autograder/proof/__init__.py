"""The proof harness: a simulated class for every lab (``classroom``: the solution, the untouched release, each
catalogued bug, correct variants, the red team's attacks) graded through the real pipeline (``report``:
``make grader-report``). Tests and benchmarks use it; nothing shipped imports it, and no platform's grader
carries it (``autograder.platforms.bundle`` leaves it out)."""
