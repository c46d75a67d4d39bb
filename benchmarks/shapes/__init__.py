"""`specdec-bench shapes`: per-call costs of real-size pairs with random weights (T5 and Whisper)."""
