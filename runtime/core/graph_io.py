"""The export's graph inputs and outputs, by name: what specdec-export writes (export/), what the loader checks
(runtime/loading/manifest.py, limits.py) and what the engine binds (runtime/engine/) are these names."""

ENCODER_INPUTS = ("input_ids",)
ENCODER_OUTPUTS = ("cross_kv",)                 # every layer's cross-attention K/V, computed once per request
DECODER_INPUTS = ("input_ids", "past_kv", "cross_kv")
DECODER_OUTPUTS = ("logits", "new_kv")          # new_kv is bound in place, after past_kv in the one cache buffer
# the speculative head fused into every decoder graph: sample or verify inside the run
HEAD_INPUTS = ("draft_probs", "uniforms", "temperature", "top_k", "top_p", "lenience", "logit_mask")
HEAD_OUTPUTS = ("probs", "accepted", "next_token")
STEPS = "steps"                                 # a draft decoder's trip count: its k steps in one run
