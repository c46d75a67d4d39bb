"""One SpeculativeDecoder used from several threads: requests are serialized on the decoder (runtime/engine/gate.py), so
every output equals the same request run alone; an abandoned stream gives the decoder back."""

from __future__ import annotations

import threading

import pytest

from specdec.runtime import SpecdecError, SpeculativeDecoder

THREADS, REQUESTS = 4, 3
PROMPTS = [f"w{3 + i} w{9 + 2 * i} w{20 + i} w{40 - i}" for i in range(THREADS * REQUESTS)]


def run_threads(work, n=THREADS, timeout=300):
    """Run work(i) on n threads started together; return {i: result or exception}."""
    results, barrier = {}, threading.Barrier(n)

    def body(i):
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as err:       # noqa: BLE001 - reported by the test
            results[i] = err

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread is still waiting for the decoder"
    return results


@pytest.fixture
def decoder(related_pair):
    return SpeculativeDecoder.load(related_pair[2], provider="cpu")


REQUEST_KINDS = {
    "greedy auto": dict(max_new_tokens=24),
    "greedy draft": dict(max_new_tokens=24, draft="draft", gamma=3),
    "sampled draft": dict(max_new_tokens=24, draft="draft", gamma=3, temperature=1.0),
    "sampled chain": dict(max_new_tokens=24, draft="lookup,draft", gamma=4, temperature=0.8, top_p=0.9),
}


@pytest.mark.parametrize("kind", list(REQUEST_KINDS))
def test_concurrent_generate_equals_each_request_alone(decoder, kind):
    params = REQUEST_KINDS[kind]
    alone = {i: decoder.generate(p, seed=i, **params).token_ids for i, p in enumerate(PROMPTS)}

    def work(t):
        return [decoder.generate(PROMPTS[t * REQUESTS + j], seed=t * REQUESTS + j, **params).token_ids
                for j in range(REQUESTS)]

    results = run_threads(work)
    for t in range(THREADS):
        assert not isinstance(results[t], BaseException), repr(results[t])
        assert results[t] == [alone[t * REQUESTS + j] for j in range(REQUESTS)]


def test_streams_beams_and_generates_together(decoder):
    """Thread 0 streams, thread 1 generates, thread 2 runs beam searches, thread 3 resets the estimates between
    generates; every output equals its request alone."""
    sampled = dict(max_new_tokens=20, draft="draft", gamma=2, temperature=1.0)
    beams = dict(max_new_tokens=12, num_beams=3, num_return_sequences=2)
    alone_stream = [decoder.generate(p, seed=7, **sampled).token_ids for p in PROMPTS[:REQUESTS]]
    alone_gen = [decoder.generate(p, seed=8, **sampled).token_ids for p in PROMPTS[REQUESTS:2 * REQUESTS]]
    alone_beam = [decoder.generate(p, **beams).sequences for p in PROMPTS[2 * REQUESTS:3 * REQUESTS]]
    alone_greedy = [decoder.generate(p, max_new_tokens=20).token_ids for p in PROMPTS[3 * REQUESTS:]]

    def work(t):
        out = []
        for j in range(REQUESTS):
            prompt = PROMPTS[t * REQUESTS + j]
            if t == 0:
                out.append([tok for piece in decoder.stream(prompt, seed=7, **sampled) for tok in piece.token_ids])
            elif t == 1:
                out.append(decoder.generate(prompt, seed=8, **sampled).token_ids)
            elif t == 2:
                out.append(decoder.generate(prompt, **beams).sequences)
            else:
                decoder.reset_estimates()
                out.append(decoder.generate(prompt, max_new_tokens=20).token_ids)
        return out

    results = run_threads(work)
    assert results == {0: alone_stream, 1: alone_gen, 2: alone_beam, 3: alone_greedy}


def test_a_stream_holds_the_decoder_between_pieces(decoder):
    """While thread A is between two pieces of its stream, thread B's generate waits; A's tokens stay right."""
    prompt, other = PROMPTS[0], PROMPTS[1]
    alone = [tok for piece in decoder.stream(prompt, max_new_tokens=24, gamma=1, draft="draft")
             for tok in piece.token_ids]
    alone_other = decoder.generate(other, max_new_tokens=24).token_ids
    stream = decoder.stream(prompt, max_new_tokens=24, gamma=1, draft="draft")
    got = list(next(stream).token_ids)
    started, finished = threading.Event(), {}

    def other_request():
        started.set()
        finished["ids"] = decoder.generate(other, max_new_tokens=24).token_ids

    waiter = threading.Thread(target=other_request)
    waiter.start()
    started.wait()
    waiter.join(0.3)
    assert waiter.is_alive(), "another request ran while the stream held the decoder"
    for piece in stream:
        got.extend(piece.token_ids)
    waiter.join(120)
    assert got == alone and finished["ids"] == alone_other


def test_an_abandoned_stream_loses_the_decoder_after_stream_idle_s(related_pair):
    decoder = SpeculativeDecoder.load(related_pair[2], provider="cpu", stream_idle_s=0.2)
    abandoned = decoder.stream(PROMPTS[0], max_new_tokens=24, gamma=1, draft="draft")
    next(abandoned)                                   # holds the decoder, never advanced again by this thread
    expected = SpeculativeDecoder.load(related_pair[2], provider="cpu").generate(PROMPTS[1], max_new_tokens=24)
    results = run_threads(lambda i: decoder.generate(PROMPTS[1], max_new_tokens=24).token_ids, n=2, timeout=120)
    assert results == {0: expected.token_ids, 1: expected.token_ids}
    with pytest.raises(SpecdecError, match="this stream was ended because it was not advanced for") as err:
        next(abandoned)
    assert "\n" not in str(err.value)
    assert decoder.generate(PROMPTS[2], max_new_tokens=8).stop_reason     # still usable


def test_a_closed_or_dropped_stream_gives_the_decoder_back_at_once(related_pair):
    decoder = SpeculativeDecoder.load(related_pair[2], provider="cpu", stream_idle_s=1e6)
    for let_go in ("close", "drop", "break"):
        stream = decoder.stream(PROMPTS[0], max_new_tokens=24, gamma=1, draft="draft")
        next(stream)
        if let_go == "close":
            stream.close()
        elif let_go == "drop":
            del stream
        else:
            for _ in decoder.stream(PROMPTS[0], max_new_tokens=24, gamma=1, draft="draft"):
                break                                 # the loop's generator is dropped right after
            del stream                                # (and the first one, before the thread starts)
        results = run_threads(lambda i: decoder.generate(PROMPTS[1], max_new_tokens=8).token_ids, n=1, timeout=60)
        assert isinstance(results[0], list), (let_go, results[0])


def test_the_streams_own_thread_moving_on_ends_the_stream(decoder):
    """One thread cannot iterate two requests on one decoder at once: a new request ends its unfinished stream
    (the next piece is a one-line error) instead of waiting for itself."""
    alone = decoder.generate(PROMPTS[1], max_new_tokens=16).token_ids
    first = decoder.stream(PROMPTS[0], max_new_tokens=24, gamma=1, draft="draft")
    next(first)
    assert decoder.generate(PROMPTS[1], max_new_tokens=16).token_ids == alone
    with pytest.raises(SpecdecError, match="its thread started another request on the same decoder"):
        next(first)
    second = decoder.stream(PROMPTS[2], max_new_tokens=24)
    next(second)
    decoder.reset_estimates()                         # an entry point too
    with pytest.raises(SpecdecError, match="this stream was ended"):
        list(second)
