"""`specdec-bench beams`: beam search, target-only against exact speculative beam search and transformers."""
