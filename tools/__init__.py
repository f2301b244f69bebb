"""Maintainer scripts (run through the Makefile)."""
