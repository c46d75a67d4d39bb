"""The Batcher (runtime/scheduling/batcher.py): requests submitted from many threads join one running batch between
rounds.

Every request's greedy output equals the prompt generated alone; requests really share runs (rows per run > 1);
streams' pieces add up; a cancelled request leaves at the next round and the others finish; past max_queue a
submit is refused at once with a one-line error and the batcher goes on serving; bad input fails in submit alone.
"""

from __future__ import annotations

import threading

import pytest
from tinymodels import random_prompts

from specdec.runtime import Params, SpecdecError


def alone(dec, prompts, n):
    return [dec.generate(input_ids=p, draft="none", max_new_tokens=n).token_ids for p in prompts]


def test_requests_from_many_threads_share_runs_and_equal_alone(related_decoder):
    dec = related_decoder
    prompts = random_prompts(dec.vocab_size, 24, seed=21)
    ref = alone(dec, prompts, 20)
    got = [None] * len(prompts)
    with dec.batcher(max_batch=8, max_queue=64) as server:
        def client(first):
            for i in range(first, len(prompts), 6):     # 6 threads, 4 requests each, one after another
                draft = ("none", "lookup", "auto")[i % 3]
                got[i] = server.submit(input_ids=prompts[i], max_new_tokens=20, draft=draft).result().token_ids

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        counters = dict(server.counters)
    assert got == ref
    assert counters["rows"] > 1.5 * counters["rounds"], counters      # requests shared target runs


def test_a_stream_joins_a_running_batch(related_decoder):
    dec = related_decoder
    prompts = random_prompts(dec.vocab_size, 5, seed=22)
    ref = alone(dec, prompts, 24)
    with dec.batcher(max_batch=4) as server:
        long = server.submit(input_ids=prompts[0], max_new_tokens=24)
        pieces = iter(long)
        first = next(pieces)                        # the batch runs; the others join it
        others = [server.submit(input_ids=p, max_new_tokens=24) for p in prompts[1:]]
        tokens = first.token_ids + [t for piece in pieces for t in piece.token_ids]
        assert [tokens] + [o.result().token_ids for o in others] == ref
        assert server.counters["rows"] > server.counters["rounds"]


def test_cancel_frees_the_row_and_the_others_finish(related_decoder):
    dec = related_decoder
    prompts = random_prompts(dec.vocab_size, 3, seed=23)
    with dec.batcher(max_batch=3) as server:
        doomed = server.submit(input_ids=prompts[0], max_new_tokens=60, min_new_tokens=0)
        others = [server.submit(input_ids=p, max_new_tokens=16) for p in prompts[1:]]
        pieces = iter(doomed)
        next(pieces)
        doomed.cancel()
        rest = list(pieces)
        result = doomed.result()
        assert result.stop_reason == "cancelled" and len(result.token_ids) < 60
        assert not rest or rest[-1].stop_reason == "cancelled"
        assert [o.result().token_ids for o in others] == alone(dec, prompts[1:], 16)
        waiting = server.submit(input_ids=prompts[0], max_new_tokens=8)
        assert waiting.result().token_ids == alone(dec, prompts[:1], 8)[0]


def test_busy_past_max_queue_then_serving_goes_on(related_decoder):
    dec = related_decoder
    prompts = random_prompts(dec.vocab_size, 6, seed=24)
    with dec.batcher(max_batch=2, max_queue=3) as server:
        with dec.scheduler.gate.held():                      # hold the decoder: the batch cannot start, requests wait
            accepted = [server.submit(input_ids=p, max_new_tokens=8) for p in prompts[:3]]
            with pytest.raises(SpecdecError) as err:
                server.submit(input_ids=prompts[3], max_new_tokens=8)
            assert "busy" in str(err.value) and "max_queue" in str(err.value) and "\n" not in str(err.value)
        assert [t.result().token_ids for t in accepted] == alone(dec, prompts[:3], 8)
        assert server.submit(input_ids=prompts[4], max_new_tokens=8).result().token_ids == \
            alone(dec, prompts[4:5], 8)[0]


def test_bad_input_fails_in_submit_alone(related_decoder):
    dec = related_decoder
    with dec.batcher() as server:
        for kwargs, words in ((dict(input_ids=[dec.vocab_size + 1]), "outside the vocabulary"),
                              (dict(input_ids=[3, 1], temperature=-2), "temperature"),
                              (dict(input_ids=[3, 1], draft="nosuch"), "nosuch"),
                              (dict(input_ids=[3, 1], num_beams=2, max_new_tokens=0), "max_new_tokens"),
                              (dict(prompt=None), "exactly one")):
            with pytest.raises(SpecdecError) as err:
                server.submit(**kwargs)
            assert words in str(err.value) and "\n" not in str(err.value), (kwargs, str(err.value))
        assert server.submit(input_ids=[3, 4, 1], max_new_tokens=4).result().stop_reason
    with pytest.raises(SpecdecError):
        server.submit(input_ids=[3, 1])               # closed
    for kwargs in (dict(max_batch=0), dict(max_batch=10 ** 6), dict(max_queue=-1)):
        with pytest.raises(SpecdecError):
            dec.batcher(**kwargs)


def test_a_failing_batch_ends_its_tickets_and_the_batcher_goes_on(related_decoder, monkeypatch):
    """A join that fails (here: a broken encoder copy for one prompt) ends every ticket the batch had taken with a
    one-line error, even one that never got a piece; nothing hangs, and later requests are served."""
    from specdec.runtime.engine.batch_model import BatchModel

    dec = related_decoder
    prompts = random_prompts(dec.vocab_size, 3, seed=25)
    real = BatchModel.join

    def join(self, joining):
        if any(list(ids) == list(prompts[0]) for _, ids, _, _ in joining):
            raise RuntimeError("broken on purpose")
        return real(self, joining)

    monkeypatch.setattr(BatchModel, "join", join)
    with dec.batcher(max_batch=2) as server:
        doomed = server.submit(input_ids=prompts[0], max_new_tokens=8)
        outcome = []
        waiter = threading.Thread(target=lambda: outcome.append(pytest.raises(SpecdecError, doomed.result)))
        waiter.start()
        waiter.join(timeout=60)
        assert not waiter.is_alive(), "a ticket of a failed batch was never ended"
        message = str(outcome[0].value)
        assert "the batch failed" in message and "broken on purpose" in message and "\n" not in message
        monkeypatch.setattr(BatchModel, "join", real)
        assert server.submit(input_ids=prompts[1], max_new_tokens=8).result().token_ids == \
            alone(dec, prompts[1:2], 8)[0]


def test_a_batch_failing_before_it_takes_a_request_ends_the_requests_and_close_returns(related_decoder,
                                                                                          monkeypatch):
    """A batch that fails before taking anything (here: opening its model) would fail again for the same queue: each
    failure ends the oldest waiting request with the one-line error, so no ticket waits forever and close() returns
    (the batcher spun on the same queue before)."""
    from specdec.runtime.engine.batch_model import BatchModel

    dec = related_decoder
    prompts = random_prompts(dec.vocab_size, 3, seed=26)
    real = BatchModel.__init__

    def broken(self, *args, **kwargs):
        raise SpecdecError("cannot open the batch model on purpose")

    monkeypatch.setattr(BatchModel, "__init__", broken)
    monkeypatch.setattr(dec.scheduler, "_batch_model", None)
    server = dec.batcher(max_batch=2)
    tickets = [server.submit(input_ids=ids, max_new_tokens=8) for ids in prompts]
    outcome = []
    waiter = threading.Thread(target=lambda: outcome.extend(pytest.raises(SpecdecError, t.result) for t in tickets))
    waiter.start()
    waiter.join(timeout=60)
    assert not waiter.is_alive(), "a request of a batch that never started was never ended"
    assert all("on purpose" in str(e.value) and "\n" not in str(e.value) for e in outcome), outcome
    closer = threading.Thread(target=server.close)
    closer.start()
    closer.join(timeout=60)
    assert not closer.is_alive(), "close() hung"
    monkeypatch.setattr(BatchModel, "__init__", real)
    with dec.batcher(max_batch=2) as again:
        got = again.submit(input_ids=prompts[0], max_new_tokens=8).result().token_ids
        assert got == alone(dec, prompts[:1], 8)[0]


def test_requests_a_batch_cannot_run_are_submitted_the_same_way_and_run_alone(related_decoder):
    """SpeculativeDecoder.submit (its own batcher) takes every request: a draft model's, beam search's and a stream
    of a draft model's run alone on the decoder and give what generate() gives; a stream cancelled after its first
    piece frees the decoder (a generate() after it runs), and a batchable request beside them still joins a batch."""
    dec = related_decoder
    prompts = random_prompts(dec.vocab_size, 3, seed=26)
    asks = (dict(draft="draft", gamma=3, max_new_tokens=12), dict(num_beams=3, max_new_tokens=8, draft="none"),
            dict(draft="none", max_new_tokens=12))
    ref = [dec.generate(input_ids=p, **ask).token_ids for p, ask in zip(prompts, asks)]
    tickets = [dec.submit(input_ids=p, **ask) for p, ask in zip(prompts, asks)]
    assert [type(t).__name__ for t in tickets] == ["Alone", "Alone", "Ticket"]
    assert [t.result().token_ids for t in tickets] == ref
    streamed = dec.submit(input_ids=prompts[0], **asks[0])
    assert [t for piece in streamed for t in piece.token_ids] == ref[0]
    assert streamed.result().token_ids == ref[0]
    cut = dec.submit(input_ids=prompts[0], draft="draft", gamma=1, max_new_tokens=12, min_new_tokens=12)
    first = next(iter(cut))
    cut.cancel()
    assert cut.result().stop_reason == "cancelled" and cut.result().token_ids == first.token_ids
    assert dec.generate(input_ids=prompts[1], **asks[1]).token_ids == ref[1]      # the decoder is free again
    with pytest.raises(SpecdecError) as err:
        list(dec.submit(input_ids=prompts[1], **asks[1]))                        # beam search cannot stream
    assert "cannot stream" in str(err.value)


def test_a_request_a_batch_cannot_run_is_planned_once(related_decoder, monkeypatch):
    """Admission checks and plans a request once, where it enters: a request that cannot join a batch (a draft
    model's) is planned by one planner call from submit() to its Result (the decoder planned it three times before:
    as a row, which failed, alone, and again when the ticket ran), and so is a batchable one and a generate()."""
    import specdec.runtime.scheduling.admission as admission_module

    dec = related_decoder
    prompt = random_prompts(dec.vocab_size, 1, seed=31)[0]
    real, calls = admission_module.plans, []

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(admission_module, "plans", counting)
    ticket = dec.submit(input_ids=prompt, draft="draft", gamma=2, max_new_tokens=8)
    assert type(ticket).__name__ == "Alone"
    ticket.result()
    assert len(calls) == 1
    dec.submit(input_ids=prompt, draft="none", max_new_tokens=8).result()
    dec.generate(input_ids=prompt, draft="draft", gamma=2, max_new_tokens=8)
    assert len(calls) == 3


def test_an_alone_ticket_frees_the_decoder_when_left_cancelled_or_failed(related_decoder):
    """Leaving a loop over an Alone ticket early cancels it (a generate() from another thread then runs at once, not
    after stream_idle_s); cancel() before any read means it never runs, and from another thread it stops the reader;
    a failed read raises the same one-line error on every later read."""
    dec = related_decoder
    prompt = random_prompts(dec.vocab_size, 1, seed=27)[0]
    long = dict(draft="draft", gamma=1, max_new_tokens=30, min_new_tokens=30)
    ticket = dec.submit(input_ids=prompt, **long)
    for piece in ticket:
        break
    other = []
    waiter = threading.Thread(target=lambda: other.append(dec.generate(input_ids=prompt, max_new_tokens=4)))
    waiter.start()
    waiter.join(timeout=dec.stream_idle_s / 2)
    assert not waiter.is_alive() and other, "the decoder stayed held after leaving the loop"
    assert ticket.result().stop_reason == "cancelled" and ticket.result().token_ids == piece.token_ids
    early = dec.submit(input_ids=prompt, **long)
    early.cancel()
    assert list(early) == [] and early.result().stop_reason == "cancelled" and early.result().token_ids == []
    read = dec.submit(input_ids=prompt, **long)
    pieces = iter(read)
    first = next(pieces)
    stopper = threading.Thread(target=read.cancel)
    stopper.start()
    stopper.join()
    rest = list(pieces)
    assert read.result().stop_reason == "cancelled" and len(first.token_ids + [t for p in rest for t in p.token_ids]) < 30
    beams = dec.submit(input_ids=prompt, num_beams=2, max_new_tokens=4, draft="none")
    for _ in range(2):
        with pytest.raises(SpecdecError, match="cannot stream"):
            list(beams)
    with pytest.raises(SpecdecError, match="cannot stream"):
        beams.result()
    assert dec.generate(input_ids=prompt, max_new_tokens=4).token_ids == other[0].token_ids


def test_a_decoder_loaded_with_graph_capture_runs_every_request_alone(tiny_capture_export):
    """Batches run the eager graphs, which a decoder loaded with graph_capture does not open: its batcher (the one
    specdec-serve and submit() use) runs every request alone, batchable ones included, and gives what generate()
    gives; nothing waits for a batch that cannot start."""
    from specdec.runtime import SpeculativeDecoder

    dec = SpeculativeDecoder.load(tiny_capture_export, provider="cpu", threads=1, graph_capture=True)
    prompts = random_prompts(dec.vocab_size, 3, seed=27)
    asks = (dict(draft="none"), dict(draft="lookup", gamma=2), dict(draft="draft", gamma=3))
    ref = [dec.generate(input_ids=p, max_new_tokens=10, **ask).token_ids for p, ask in zip(prompts, asks)]
    # first: a batch that cannot start would hold close()
    assert dec.scheduler.admission.admit(input_ids=prompts[0], params=Params(draft="none")).row is None
    with dec.batcher(max_batch=4) as server:
        tickets = [server.submit(input_ids=p, max_new_tokens=10, **ask) for p, ask in zip(prompts, asks)]
        assert [type(t).__name__ for t in tickets] == ["Alone"] * 3
        assert [t.result().token_ids for t in tickets] == ref
