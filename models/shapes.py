"""The official T5 v1.0 shapes (config.json of t5-small, t5-base, t5-large), written down so that nothing is
downloaded. `specdec-models widen` builds models of these shapes; `specdec-bench shapes` exports random ones.

All: vocab 32128, ReLU feed-forward, 32 relative-attention buckets over max distance 128, tied input/output
embeddings with the d_model^-0.5 output scaling, layer_norm_epsilon 1e-6, pad = decoder start = 0, eos = 1,
num_decoder_layers = num_layers.
"""

COMMON = dict(vocab_size=32128, feed_forward_proj="relu", relative_attention_num_buckets=32,
              relative_attention_max_distance=128, layer_norm_epsilon=1e-6, initializer_factor=1.0,
              tie_word_embeddings=True, dropout_rate=0.1, n_positions=512, pad_token_id=0, eos_token_id=1,
              decoder_start_token_id=0, is_encoder_decoder=True)
CONFIGS = {
    "t5-small": dict(d_model=512, d_ff=2048, d_kv=64, num_heads=8, num_layers=6),         # 60.5M parameters
    "t5-base": dict(d_model=768, d_ff=3072, d_kv=64, num_heads=12, num_layers=12),        # 223M
    "t5-large": dict(d_model=1024, d_ff=4096, d_kv=64, num_heads=16, num_layers=24),      # 738M
}
T5_PADDED_ROWS = 28         # T5's tokenizer makes 32,100 ids (32,000 pieces, 100 sentinels) of the 32,128 rows
