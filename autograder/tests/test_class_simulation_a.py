"""The class simulation, labs 01, 03, 05, 07 (every other lab: see ``class_simulation``)."""

from class_simulation import define_tests

define_tests(globals(), half=0)
