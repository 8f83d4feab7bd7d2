"""Recurring schedules: a message posted to a queue at each slot of a plan."""
