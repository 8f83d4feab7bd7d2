"""Redis driver: sorted sets indexed by due time, every operation one Lua script call."""
