"""The built-in scenario library: each family of naive patterns next to the fix, registered
with the profiles where the real filesystem makes the naive one fail."""
