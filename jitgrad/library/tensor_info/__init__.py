"""What a tensor or dtype says about itself: queries, type info and printing."""
