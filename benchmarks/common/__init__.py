"""What specdec-bench's commands share: flags, prompts, the machine line, the cost probe, Theorem 3.8, the
peers, tables and the report."""
