"""Helpers the test suites share: stores, the API under test, pushes, Keystone, faults."""
