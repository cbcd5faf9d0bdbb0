"""Training: data setup, the loop, validation, optimizers and schedules."""
