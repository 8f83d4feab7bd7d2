"""Pools and flavors: queues spread over many stores, placed by a catalog."""
