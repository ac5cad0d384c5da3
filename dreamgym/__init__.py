"""dreamgym."""
