"""Conformance suites shipped with tensorfile: base classes a store (and, in time, a format)
subclasses in its tests, so that a new one is added by passing them. Importing this package
imports pytest; ``import tensorfile`` never does."""

from .store import StoreConformance

__all__ = ["StoreConformance"]
