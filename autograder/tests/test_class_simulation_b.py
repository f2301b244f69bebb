"""The class simulation, labs 02, 04, 06, 08 (every other lab: see ``class_simulation``)."""

from class_simulation import define_tests

define_tests(globals(), half=1)
