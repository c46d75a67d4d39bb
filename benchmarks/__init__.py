"""specdec.bench: latency, acceptance rate, cost ratio and speedup measurements."""
