"""Grader functions the hidden tests call: one module per lab.

Each ``check_*`` function takes the student's function or class, runs edge cases first and seeded
random workloads after, compares with ``paged_kv`` on what the lab's contract fixes, and raises
``AssertionError`` with a student-readable message at the first failure.
"""
