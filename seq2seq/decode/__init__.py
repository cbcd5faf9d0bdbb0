"""Search over the model contract, and text-in, text-out translation."""
