"""The device buffers a round of Algorithm 1 passes between draft sources and the target, and the only place that
knows where in them each graph reads and writes (allocated once at load).

    tokens    [max_length + gamma_max + 1 | n, z]  int64. Slot i holds the token at decoder position i (slot 0: the
              decoder start token). A round starts at the target's length S: slot S holds the current token (in no
              cache yet) and each proposal appends guesses after `end`, so any model, however far its cache lags,
              reads the tokens it has not seen as one contiguous view [its length, end]. A verify run writes its
              kept count n and next token z into the two slots after the sequence; the host reads them (the one
              read per verification) and writes z after the kept guesses.
    rows(l)   [gamma_max + 1, V]  the q rows level l of a chain verifies against: rows(0) are the target's q_1 .. q_k
              (written by the source just below it), rows(1) what that source's own verifier reads, ... (never
              leave the device)
    point     [gamma_max + 1, V]  one-hot rows q_i = delta(x_i) of host-made guesses (a lookup), zero elsewhere
    p         [gamma_max + 1, V]  the target's standardized rows p_1 .. p_{k+1} of the last verification
    sink      [1, V] + one token  where a catch-up run (a lagging model reading tokens it missed) writes its unused head
    uniforms  r ~ U(0,1), a stream drawn from the request's seed in blocks: every run takes the next G+1
    params    temperature, top_k, top_p, lenience: device scalars, written once per request
    mask      [gamma_max + 2, V]  with logits processors (min_new_tokens, no_repeat_ngram_size, a decoder
              prompt's suppressed tokens): 0 / -inf per token for the rows of the run at hand, made on the host from the
              tokens before each row (every model's head adds it, so p and q are processed alike); a draft's
              proposal loop gets one row for all its steps, without the no-repeat bans (q may then differ from
              the processed draft distribution; it is what the tokens were drawn from, so the round stays exact);
              unbound ([0, V]) otherwise

Host bookkeeping: `seq` (the final tokens, positions 0..S), `end` (the last position holding a token this round)
and `known` (the tokens at S+1..end when the host knows them, e.g. copied by a lookup; None once a model wrote
some on the device).

A graph input or output is bound to a `View` (buffer, shape, element offset); the binder checks it against its
buffer (device.Binder). The head's inputs and outputs are named and laid out by head.Head, as for batches and beams;
the sampling parameters are its device scalars.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from ..core.graph_io import INPUT_IDS, LOGIT_MASK, TREE_INPUTS, TREE_OUTPUTS, UNIFORMS
from ..core.params import Params
from .device import Buffer
from .head import Head, View

__all__ = ["UNIFORM_BLOCK", "View", "Workspace"]

UNIFORM_BLOCK = 1 << 10     # uniforms drawn at a time (a request takes a block at reset, more as it needs)
TREE_DEPTH, TREE_MASK, TREE_UNIFORMS = TREE_INPUTS
(DRAWS,) = TREE_OUTPUTS


class Workspace:
    def __init__(self, gamma_max: int, vocab: int, device: str, max_length: int):
        self.gamma_max, self.vocab, self.device = gamma_max, vocab, device
        self.slots = max_length + gamma_max + 1
        self.ACCEPTED, self.NEXT, self.SINK = self.slots, self.slots + 1, self.slots + 2
        self.tokens = Buffer((self.slots + 3,), np.int64, device)
        self._rows = [Buffer((gamma_max + 1, vocab), np.float32, device)]
        self.p = Buffer((gamma_max + 1, vocab), np.float32, device)
        self.point = Buffer((gamma_max + 1, vocab), np.float32, device, host_only=True)
        self.sink = Buffer((1, vocab), np.float32, device)
        self._ones = []       # flat indices of `point` set to 1 by the last host-made proposal
        self.mask = Buffer((gamma_max + 2, vocab), np.float32, device, host_only=True)
        self._banned = []     # flat indices of `mask` set to -inf for the last run
        self.processors = None
        self.uniforms = Buffer((UNIFORM_BLOCK,), np.float32, device, host_only=True)
        self.head = Head(1, vocab, device)          # the request's sampling parameters, the head's names
        # a tree round's depths and mask (runtime/decoding/sources/tree.py)
        self.depth = Buffer((gamma_max + 1,), np.int64, device, host_only=True)
        self.tree_mask = Buffer(((gamma_max + 1) ** 2,), np.bool_, device, host_only=True)
        self.draws = Buffer((gamma_max + 1,), np.int64, device)
        self.trees = True     # the target verifies token trees (not through the capturable graphs)
        self._rng = np.random.default_rng(0)
        self.params = None    # the request's Params, set by reset
        self._used = 0        # uniforms of the current block taken
        self.seq: list = []
        self.end = 0
        self.known: list | None = []
        self._views = {}      # key -> (inputs, outputs) but the uniforms

    # -- per request and per round ----------------------------------------------------------------------------
    def reset(self, prompt, params: Params, processors=None) -> None:
        """A new request whose decoder starts from the tokens `prompt`: [the start token] (T5), or the decoder prompt
        its family made (decoding/prompt.py); the last of them is the current token. `processors`
        (runtime/decoding/processors.py) when active: every run's head rows are masked."""
        prompt = [int(t) for t in prompt]
        self.tokens.write(prompt)
        self.processors = processors if processors is not None and processors.active else None
        self.seq, self.end, self.known = prompt, len(prompt) - 1, []
        self._rng = np.random.default_rng(params.seed)
        self.params = params        # the request's (what an auto choice keeps its estimates by)
        self._refill()
        self.head.set(params)

    @property
    def start(self) -> int:
        """S: the position of the current token (the target's cache holds 0..S-1)."""
        return len(self.seq) - 1

    def rows(self, level: int) -> Buffer:
        while len(self._rows) <= level:
            self._rows.append(Buffer((self.gamma_max + 1, self.vocab), np.float32, self.device))
        return self._rows[level]

    def _refill(self) -> None:
        self.uniforms.write(self._rng.random(UNIFORM_BLOCK, dtype=np.float32))
        self._used = 0

    def _take(self, count: int) -> View:
        if self._used + count > UNIFORM_BLOCK:
            self._refill()
        view = View(self.uniforms, (count,), self._used)
        self._used += count
        return view

    # -- the views of one run -----------------------------------------------------------------------------------
    def run(self, first: int, *, guesses: int = 0, q: Buffer | None = None, out: Buffer | None = None,
            out_row: int = 0, next_slot: int | None = None, last: int | None = None) -> tuple[dict, dict]:
        """Inputs and outputs of one decoder + head run over positions first..last (default: end), the last
        `guesses` of which are verified against rows 0.. of `q` (the point rows, or a level's rows). The head's
        standardized rows go to `out` from `out_row` on (the sink when None); the next token to `next_slot` (NEXT
        when None), n to ACCEPTED. (Read-only mappings, made once per distinct run.)"""
        last = self.end if last is None else last
        key = (first, last, guesses, id(q), id(out), out_row, next_slot)
        if key not in self._views:
            self._views[key] = self._make(first, last, guesses, q, out, out_row, next_slot)
        inputs, outputs = self._views[key]
        inputs = {**inputs, UNIFORMS: self._take(guesses + 1)}
        if self.processors is not None:
            inputs[LOGIT_MASK] = self._masked(last - guesses, guesses + 1)
        return inputs, outputs

    def _masked(self, first_row: int, count: int, repeats: bool = True) -> View:
        """The logits processors' mask for head rows at positions first_row .. first_row+count-1: row j bans what
        the processors ban after the tokens at positions 0 .. first_row+j (whichever model runs: p and q alike;
        `repeats` False: without the no-repeat n-gram bans, Processors.banned)."""
        tokens = self.tokens.flat()
        flat = []
        for j in range(count):
            flat += [j * self.vocab + b for b in self.processors.banned(tokens[:first_row + j + 1].tolist(), repeats)]
        self.mask.scatter(self._banned + flat, [0.0] * len(self._banned) + [-np.inf] * len(flat))
        self._banned = flat
        return View(self.mask, (count, self.vocab))

    def _make(self, first, last, guesses, q, out, out_row, next_slot, draws: int = 0):
        """The run's views; `draws` > 0: a proposal's `draws` rows and tokens (the loop's) instead of the head's
        guesses + 1 rows and one token."""
        inputs = {INPUT_IDS: View(self.tokens, (1, last - first + 1), first),
                  **self.head.inputs(q=View(q if q is not None else self.point, (guesses, self.vocab)))}
        if out is None:
            probs = View(self.sink, (1, self.vocab))
        else:
            probs = View(out, (draws or guesses + 1, self.vocab), out_row * self.vocab)
        outputs = self.head.outputs(probs, View(self.tokens, (1,), self.ACCEPTED),
                                    View(self.tokens, (draws or 1,), self.NEXT if next_slot is None else next_slot))
        return MappingProxyType(inputs), MappingProxyType(outputs)

    def proposal(self, first: int, k: int, out: Buffer, out_row: int, *, guesses: int = 0,
                 q: Buffer | None = None) -> tuple[dict, dict]:
        """A draft's proposal loop in one run over positions first..end: the last `guesses` tokens (a
        chain's level below proposed them, q in rows 0.. of `q`) are verified first, then the model samples until
        it has k tokens t_1 .. t_k (the kept guesses, the token its verification drew, its own draws). They land
        after the guesses' base (end - guesses + 1 ..), their rows in `out` from `out_row` on, the kept count at
        ACCEPTED; guesses + k uniforms. Without guesses: k sampling steps after end."""
        key = ("proposal", first, self.end, k, guesses, id(q), id(out), out_row)
        if key not in self._views:
            self._views[key] = self._make(first, self.end, guesses, q, out, out_row, self.end - guesses + 1, draws=k)
        inputs, outputs = self._views[key]
        inputs = {**inputs, UNIFORMS: self._take(guesses + k)}
        if self.processors is not None:     # one row for every step: what stands after the first row's tokens
            inputs[LOGIT_MASK] = self._masked(self.end - guesses, 1, repeats=False)
        return inputs, outputs

    def tree_room(self) -> int:
        """The most nodes a tree round may verify now: the rows the buffers hold, and the target's cache room (the
        run appends the current token and every node); 0 when the target verifies no trees."""
        if not self.trees:
            return 0
        return max(0, min(self.gamma_max, self.slots - self.gamma_max - 1 - self.start - 1))

    def write_tree(self, tree) -> None:
        """A tree round's nodes 1 .. M at positions start+1 .. start+M (slot order), their depths and ancestor mask.
        The host then knows no chain of guesses (`known` None) until the verdict."""
        m = tree.size
        self.tokens.write(tree.tokens[1:], self.start + 1)
        self.depth.write(tree.depth)
        self.tree_mask.write(tree.mask())
        self.end, self.known = self.start + m, None

    def tree_run(self, size: int) -> tuple[dict, dict]:
        """The target's run over the current token and a tree of `size` nodes (after write_tree): the head's rows
        p_0 .. p_M to `p` (its acceptance outputs are not read: the q rows bound are the point rows, whatever they
        hold), one draw y_i ~ p_i per node with fresh uniforms to `draws`."""
        inputs, outputs = self.run(self.start, guesses=size, q=self.point, out=self.p)
        n = size + 1
        inputs = {**inputs, TREE_DEPTH: View(self.depth, (n,)), TREE_MASK: View(self.tree_mask, (n, n)),
                  TREE_UNIFORMS: self._take(n)}
        return inputs, {**outputs, DRAWS: View(self.draws, (n,))}

    def tree_verdict(self, path: list, tokens: list) -> None:
        """The walk's result: the kept nodes' tokens and the next token at start+1 ..; the round ends after them."""
        self.tokens.write(tokens, self.start + 1)
        self.end, self.known = self.start + len(path) + 1, list(tokens)

    def accepted(self) -> int:
        """The kept count a verifying run wrote (one read)."""
        return int(self.tokens.flat()[self.ACCEPTED])

    def catch_up(self, first: int, last: int) -> tuple[dict, dict]:
        """A run over positions first..last whose only purpose is the model's cache (its head output is dropped)."""
        return self.run(first, out=None, next_slot=self.SINK, last=last)

    # -- what the host reads and writes ---------------------------------------------------------------------------
    def judged(self, guesses: int) -> tuple[int, list]:
        """After a verify run over the last `guesses` positions: (n, [x_1 .. x_n, z]); z is written after x_n, which
        becomes the new end of the round."""
        base = self.end - guesses
        flat = self.tokens.flat()
        n, z = int(flat[self.ACCEPTED]), int(flat[self.NEXT])
        if self.known is not None and len(self.known) >= base - self.start + n:
            kept = self.known[base - self.start:base - self.start + n]
        else:
            kept = flat[base + 1:base + 1 + n].tolist()
        self.tokens.write([z], base + n + 1)
        self.end = base + n + 1
        if self.known is not None:
            self.known = self.known[:base - self.start] + kept + [z]
        return n, kept + [z]

    def appended_on_device(self, count: int = 1, replaced: int = 0) -> None:
        """A model wrote the tokens at end - replaced + 1 .. end - replaced + count on the device (over the last
        `replaced` guesses, which it verified): the host no longer knows them."""
        self.end += count - replaced
        self.known = None

    def emit(self, tokens: list) -> None:
        """The target's verdict: tokens become final and the next round starts after them."""
        self.seq.extend(tokens)
        self.end, self.known = self.start, []

    def write_point_guesses(self, tokens) -> None:
        """Host-made guesses at end+1 .. with point-mass distributions q_i = delta(x_i) in the point rows."""
        ones = [i * self.vocab + int(t) for i, t in enumerate(tokens)]
        self.point.scatter(self._ones + ones, [0.0] * len(self._ones) + [1.0] * len(ones))
        self._ones = ones
        self.tokens.write(tokens, self.end + 1)
        self.end += len(tokens)
        if self.known is not None:
            self.known = self.known + [int(t) for t in tokens]

    def retract(self, count: int) -> None:
        """Drop the last `count` host-made guesses (a proposal cut short before it was verified)."""
        self.end -= count
        if self.known is not None and count:
            self.known = self.known[:-count]
