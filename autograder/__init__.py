"""Instructor side of the course: nbgrader configuration, graders and their tests."""
