"""What a run reports: log file, progress, TensorBoard, plots."""
