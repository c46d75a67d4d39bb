"""Sampler graphs, run on the same device as the models so logits and distributions never reach the host.

Each comes in two variants, `*_topkp.onnx` with top-k/top-p filtering and a plain one without (see standardize).

sample.onnx (a draft step, and the target-only baseline):
    logits [rows, vocab] fp32, uniforms [rows] fp32, temperature [1] fp32, top_k [1] int64, top_p [1] fp32
 -> probs [rows, vocab] fp32 (the standardized distribution q), tokens [rows] int64 (inverse-CDF draw, argmax at T=0)

verify.onnx (Algorithm 1's acceptance and residual step, for gamma >= 1 proposals):
    target_logits [gamma+1, vocab] fp32, draft_probs [gamma, vocab] fp32, draft_tokens [gamma] int64,
    uniforms [gamma+1] fp32 (r_1..r_gamma, then one for the final draw), temperature, top_k, top_p, lenience [1] fp32
 -> accepted [1] int64 (n), next_token [1] int64

Both standardize logits the same way (paper §2.2): temperature, then top-k, then top-p (nucleus). A guess x_i is
kept when r_i < p_i(x_i) / (l * q_i(x_i)); after the first rejection the next token comes from
norm(max(0, p_n - l * q_n)); when all are kept it comes from p_{gamma+1}. With l = 1 the output is exactly p.
At temperature 0 p and q are one-hot: a guess is kept iff it is the target's argmax (l has no effect).
"""

from __future__ import annotations

import torch
from torch import nn

SAMPLE_INPUTS = ("logits", "uniforms", "temperature", "top_k", "top_p")
SAMPLE_OUTPUTS = ("probs", "tokens")
VERIFY_INPUTS = ("target_logits", "draft_probs", "draft_tokens", "uniforms", "temperature", "top_k", "top_p",
                 "lenience")
VERIFY_OUTPUTS = ("accepted", "next_token")


def standardize(logits: torch.Tensor, temperature, top_k, top_p, filtered: bool = True) -> torch.Tensor:
    """Rows of logits -> probabilities after temperature, top-k and top-p; one-hot argmax when temperature <= 0.

    `filtered=False` builds the graph without top-k/top-p: sorting the vocabulary is most of a sampler's cost, so
    the export writes both variants and the runtime uses the unfiltered one when top_k = 0 and top_p = 1."""
    vocab = logits.shape[-1]
    rank = torch.arange(vocab, device=logits.device)
    greedy = temperature <= 0
    z = logits / torch.where(greedy, torch.ones_like(temperature), temperature)
    if filtered:
        z = _top_k_top_p(z, top_k, top_p, rank)
    probs = torch.softmax(z, dim=-1)
    one_hot = (rank == torch.argmax(logits, dim=-1, keepdim=True)).to(probs.dtype)
    return torch.where(greedy, one_hot, probs)


def _top_k_top_p(z, top_k, top_p, rank):
    """Set to -inf every logit outside the top-k and outside the smallest set whose mass reaches top_p."""
    vocab = z.shape[-1]
    ranked, _ = torch.sort(z, dim=-1, descending=True)
    k = torch.where(top_k > 0, torch.clamp(top_k, max=vocab), torch.full_like(top_k, vocab))
    ranked = torch.where(rank < k, ranked, torch.full_like(ranked, float("-inf")))
    ranked_p = torch.softmax(ranked, dim=-1)
    before = torch.cumsum(ranked_p, dim=-1) - ranked_p          # mass of the better-ranked tokens
    keep = (before < top_p) | (top_p >= 1.0)
    keep = keep & (rank < k)
    kept = keep.to(torch.int64).sum(-1, keepdim=True)            # >= 1: the best token is always kept
    cutoff = torch.gather(ranked, -1, kept - 1)
    return torch.where(z < cutoff, torch.full_like(z, float("-inf")), z)


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One draw per row: the first index whose cumulative mass exceeds u * total (never a zero-mass token)."""
    cdf = torch.cumsum(probs, dim=-1)
    threshold = uniforms.unsqueeze(-1) * cdf[..., -1:]
    index = (cdf <= threshold).to(torch.int64).sum(-1)
    return torch.clamp(index, max=probs.shape[-1] - 1)


class SampleGraph(nn.Module):
    def __init__(self, filtered: bool = True):
        super().__init__()
        self.filtered = filtered

    def forward(self, logits, uniforms, temperature, top_k, top_p):
        probs = standardize(logits, temperature, top_k, top_p, self.filtered)
        return probs, inverse_cdf(probs, uniforms)


class VerifyGraph(nn.Module):
    """`residual=False` replaces the residual draw by a plain draw from p: a deliberately wrong sampler that the
    distribution tests use to show they can fail. Never export it for users."""

    def __init__(self, filtered: bool = True, residual: bool = True):
        super().__init__()
        self.filtered, self.residual = filtered, residual

    def forward(self, target_logits, draft_probs, draft_tokens, uniforms, temperature, top_k, top_p, lenience):
        gamma = draft_tokens.shape[0]
        p = standardize(target_logits, temperature, top_k, top_p, self.filtered)           # [gamma+1, vocab]
        guess = draft_tokens.unsqueeze(-1)
        p_x = torch.gather(p[:gamma], -1, guess).squeeze(-1)
        q_x = torch.gather(draft_probs, -1, guess).squeeze(-1)
        rejected = (uniforms[:gamma] * lenience * q_x >= p_x).to(torch.int64)    # not (r < p / (l q))
        accepted = (torch.cumsum(rejected, 0) == 0).to(torch.int64).sum(0, keepdim=True)   # n in 0..gamma

        q_ext = torch.cat([draft_probs, torch.zeros_like(p[:1])], dim=0)          # q_{gamma+1} = 0: bonus draw
        p_n = torch.index_select(p, 0, accepted)
        if self.residual:
            resid = torch.clamp(p_n - lenience * torch.index_select(q_ext, 0, accepted), min=0.0)
            # p == q leaves no residual mass (then no rejection can happen); fall back to p for round-off
            resid = torch.where(resid.sum(-1, keepdim=True) > 0, resid, p_n)
        else:
            resid = p_n
        next_token = inverse_cdf(resid, uniforms[gamma:])
        return accepted, next_token


def _scalars():
    return (torch.tensor([1.0]), torch.tensor([0], dtype=torch.int64), torch.tensor([1.0]))


def export_sample(path, filtered: bool = True, opset: int = 17) -> None:
    logits, uniforms = torch.randn(2, 11), torch.rand(2)
    with torch.no_grad():
        torch.onnx.export(SampleGraph(filtered), (logits, uniforms, *_scalars()), str(path),
                          input_names=list(SAMPLE_INPUTS), output_names=list(SAMPLE_OUTPUTS),
                          dynamic_axes={"logits": {0: "rows", 1: "vocab"}, "uniforms": {0: "rows"},
                                        "probs": {0: "rows", 1: "vocab"}, "tokens": {0: "rows"}},
                          opset_version=opset, dynamo=False)


def export_verify(path, filtered: bool = True, residual: bool = True, opset: int = 17) -> None:
    gamma, vocab = 3, 11
    args = (torch.randn(gamma + 1, vocab), torch.softmax(torch.randn(gamma, vocab), -1),
            torch.tensor([1, 2, 3]), torch.rand(gamma + 1), *_scalars(), torch.tensor([1.0]))
    with torch.no_grad():
        torch.onnx.export(VerifyGraph(filtered, residual), args, str(path),
                          input_names=list(VERIFY_INPUTS), output_names=list(VERIFY_OUTPUTS),
                          dynamic_axes={"target_logits": {0: "gamma_plus_1", 1: "vocab"},
                                        "draft_probs": {0: "gamma", 1: "vocab"}, "draft_tokens": {0: "gamma"},
                                        "uniforms": {0: "gamma_plus_1"}},
                          opset_version=opset, dynamo=False)
