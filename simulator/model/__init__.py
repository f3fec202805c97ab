"""What the simulated model is: its script, the prompt as blocks, the prompt cache, its ids."""
