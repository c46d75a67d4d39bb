"""How a planned request is decoded: speculative sampling, beam search, batches."""
