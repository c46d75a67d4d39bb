/*
 * specdec.hpp -- a header-only C++11 RAII wrapper over the C API in specdec.h. Link with libspecdec.so.
 *
 *   specdec::Session s("exported", R"({"provider": "cpu"})");   // specdec_open; specdec_close in ~Session
 *   specdec::Params p;                                           // specdec_params_default()
 *   p.temperature = 0.7; p.seed = 42;
 *   p.draft = "lookup,draft"; p.gamma = 4;                       // fixed source and gamma: reproducible
 *   specdec::Stats st;                                           // specdec_stats_empty()
 *   std::vector<int32_t> ids = s.generate_ids({5, 6, 7, 1}, p);
 *   std::string text = s.generate_text("translate English to German: Hello", p);
 *   s.stream_text("...", p, [](const specdec::Piece &piece) { std::cout << piece.text; return true; });
 *   specdec::Params b; b.num_beams = 4; b.num_return_sequences = 2;    // beam search (API version 4)
 *   for (const specdec::Sequence &seq : s.generate_sequences_text("...", b))   // best first
 *       std::cout << seq.score << " " << seq.text << "\n";
 *   specdec::Session w("whisper-export");                        // a Whisper export (API version 6)
 *   std::string said = w.transcribe(pcm, "en");                  // std::vector<float>, mono 16 kHz
 *   std::string same = w.transcribe_wav("clip.wav");             // language nullptr: detected; any length
 *   for (const specdec::Segment &seg : w.transcribe_segments(pcm, "en"))    // with times (API version 7)
 *       std::cout << seg.start << " " << seg.end << " " << seg.text << "\n";
 *
 * Errors: every failure throws specdec::Error (status() and what() = specdec_last_error()); the session stays
 * usable after a throw. Ownership: Session owns its handle (move-only; moved-from sessions are empty and safe to
 * destroy). Threads: as specdec.h -- one Session may be used from several threads (calls are serialized by the
 * library), and different Sessions run concurrently. A stream callback may throw: the generation stops and the
 * exception is rethrown from stream_*() after the library has returned (it never unwinds through C).
 * Versioned structs: Params and Stats derive from specdec_params and specdec_stats and their constructors set
 * struct_size, so they are always valid to pass; Params::draft is a `const char *` that must stay valid until the
 * call that uses it returns (a string literal, or the c_str() of a std::string that outlives the call).
 */
#ifndef SPECDEC_HPP
#define SPECDEC_HPP

#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "specdec.h"

namespace specdec {

class Error : public std::runtime_error {
public:
    Error(specdec_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
    specdec_status status() const noexcept { return status_; }

private:
    specdec_status status_;
};

inline void check(specdec_status status)
{
    if (status != SPECDEC_OK)
        throw Error(status, std::string(specdec_status_name(status)) + ": " + specdec_last_error());
}

/* specdec_params with the library's defaults (gamma SPECDEC_GAMMA_AUTO, draft NULL = "auto", ...) and
   struct_size set. */
struct Params : specdec_params {
    Params() : specdec_params(specdec_params_default()) {}
};

/* specdec_stats, empty, with struct_size set (pass its address as the stats argument). */
struct Stats : specdec_stats {
    Stats() : specdec_stats(specdec_stats_empty()) {}
};

typedef specdec_session_info Info;

/* The audio a session takes (specdec_get_audio_info): its window in samples and its sample rate; both 0 for a text
   export. */
struct AudioInfo {
    size_t max_samples;
    int32_t sample_rate;
};

/* One segment of a transcript (transcribe_segments, transcribe_wav_segments; API version 7): its start and end in
   seconds from the start of the audio (end NaN where the audio's end cut the segment), and its text. */
struct Segment {
    double start;
    double end;
    std::string text;
};

/* One streamed piece; the vector and string are copies the callback may keep. */
struct Piece {
    std::vector<int32_t> token_ids;
    std::string text;
};

/* One sequence of a beam search (generate_sequences_*), best first: its ids, its text and its score (sum of
   log-probabilities / length ** length_penalty; NaN when num_beams is 1). */
struct Sequence {
    std::vector<int32_t> token_ids;
    std::string text;
    double score;
};

class Session {
public:
    Session() noexcept : handle_(nullptr) {}
    explicit Session(const std::string &export_dir, const std::string &options_json = std::string())
        : handle_(nullptr)
    {
        check(specdec_open(export_dir.c_str(), options_json.c_str(), &handle_));
    }
    ~Session() { specdec_close(handle_); }

    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;
    Session(Session &&other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
    Session &operator=(Session &&other) noexcept
    {
        if (this != &other) {
            specdec_close(handle_);
            handle_ = other.handle_;
            other.handle_ = nullptr;
        }
        return *this;
    }

    explicit operator bool() const noexcept { return handle_ != nullptr; }
    specdec_session *get() const noexcept { return handle_; }
    void close() noexcept
    {
        specdec_close(handle_);
        handle_ = nullptr;
    }

    Info info() const
    {
        Info out;
        check(specdec_get_info(handle_, &out));
        return out;
    }

    std::vector<int32_t> generate_ids(const std::vector<int32_t> &input_ids, const Params &params = Params(),
                                      Stats *stats = nullptr) const
    {
        std::vector<int32_t> out(params.max_new_tokens > 0 ? static_cast<size_t>(params.max_new_tokens) : 1);
        size_t len = 0;
        check(specdec_generate_ids(handle_, input_ids.data(), input_ids.size(), &params, out.data(), out.size(),
                                   &len, stats));
        out.resize(len);
        return out;
    }

    std::string generate_text(const std::string &prompt, const Params &params = Params(),
                              Stats *stats = nullptr) const
    {
        std::vector<char> out(256);
        size_t len = 0;
        specdec_status status = specdec_generate_text(handle_, prompt.c_str(), &params, out.data(), out.size(),
                                                      &len, stats);
        if (status == SPECDEC_E_BUFFER_TOO_SMALL) {      /* the library said how much it needs: once more */
            out.resize(len + 1);
            status = specdec_generate_text(handle_, prompt.c_str(), &params, out.data(), out.size(), &len, stats);
        }
        check(status);
        return std::string(out.data(), len);
    }

    /* The params.num_return_sequences best sequences of a beam search (params.num_beams > 1), best first, each
       with its text (specdec_generate_sequences, then specdec_decode). */
    std::vector<Sequence> generate_sequences_ids(const std::vector<int32_t> &input_ids, const Params &params,
                                                 Stats *stats = nullptr) const
    {
        return sequences(nullptr, input_ids.data(), input_ids.size(), params, stats);
    }

    std::vector<Sequence> generate_sequences_text(const std::string &prompt, const Params &params,
                                                  Stats *stats = nullptr) const
    {
        return sequences(prompt.c_str(), nullptr, 0, params, stats);
    }

    /* Token ids to text (the export's tokenizer, special tokens dropped). */
    std::string decode(const std::vector<int32_t> &ids) const
    {
        std::vector<char> out(256);
        size_t len = 0;
        specdec_status status = specdec_decode(handle_, ids.data(), ids.size(), out.data(), out.size(), &len);
        if (status == SPECDEC_E_BUFFER_TOO_SMALL) {
            out.resize(len + 1);
            status = specdec_decode(handle_, ids.data(), ids.size(), out.data(), out.size(), &len);
        }
        check(status);
        return std::string(out.data(), len);
    }

    /* Whisper exports (API version 6): mono 16 kHz float samples, or a WAV file's path, in; text, ids or (API
       version 7, a model with timestamp tokens) segments with times out. Audio of any length up to
       SPECDEC_MAX_AUDIO_SECONDS (API version 7): longer than the window, it is decoded window by window.
       language nullptr: detected; task nullptr: "transcribe" (or "translate"). */
    AudioInfo audio_info() const
    {
        AudioInfo out;
        check(specdec_get_audio_info(handle_, &out.max_samples, &out.sample_rate));
        return out;
    }

    std::string transcribe(const std::vector<float> &pcm, const char *language = nullptr, const char *task = nullptr,
                           const Params &params = Params(), Stats *stats = nullptr) const
    {
        return transcribed(pcm.data(), pcm.size(), nullptr, language, task, params, stats);
    }

    std::string transcribe_wav(const std::string &wav_path, const char *language = nullptr,
                               const char *task = nullptr, const Params &params = Params(),
                               Stats *stats = nullptr) const
    {
        return transcribed(nullptr, 0, wav_path.c_str(), language, task, params, stats);
    }

    std::vector<int32_t> transcribe_ids(const std::vector<float> &pcm, const char *language = nullptr,
                                        const char *task = nullptr, const Params &params = Params(),
                                        Stats *stats = nullptr) const
    {
        return transcribed_ids(pcm.data(), pcm.size(), nullptr, language, task, params, stats);
    }

    std::vector<int32_t> transcribe_wav_ids(const std::string &wav_path, const char *language = nullptr,
                                            const char *task = nullptr, const Params &params = Params(),
                                            Stats *stats = nullptr) const
    {
        return transcribed_ids(nullptr, 0, wav_path.c_str(), language, task, params, stats);
    }

    std::vector<Segment> transcribe_segments(const std::vector<float> &pcm, const char *language = nullptr,
                                             const char *task = nullptr, const Params &params = Params(),
                                             Stats *stats = nullptr) const
    {
        return segmented(pcm.data(), pcm.size(), nullptr, language, task, params, stats);
    }

    std::vector<Segment> transcribe_wav_segments(const std::string &wav_path, const char *language = nullptr,
                                                 const char *task = nullptr, const Params &params = Params(),
                                                 Stats *stats = nullptr) const
    {
        return segmented(nullptr, 0, wav_path.c_str(), language, task, params, stats);
    }

    /* on_piece(const Piece &) -> bool: return false to stop early. */
    template <class F>
    void stream_ids(const std::vector<int32_t> &input_ids, const Params &params, F &&on_piece,
                    Stats *stats = nullptr) const
    {
        stream(nullptr, input_ids.data(), input_ids.size(), params, on_piece, stats);
    }

    template <class F>
    void stream_text(const std::string &prompt, const Params &params, F &&on_piece, Stats *stats = nullptr) const
    {
        stream(prompt.c_str(), nullptr, 0, params, on_piece, stats);
    }

private:
    template <class F>
    struct Trampoline {
        F *fn;
        std::exception_ptr error;

        static int call(const int32_t *ids, size_t n, const char *text, size_t text_len, void *user_data)
        {
            Trampoline *self = static_cast<Trampoline *>(user_data);
            try {
                Piece piece;
                piece.token_ids.assign(ids, ids + n);
                piece.text.assign(text, text_len);
                return (*self->fn)(static_cast<const Piece &>(piece)) ? 0 : 1;
            } catch (...) {                              /* never unwind through the C library */
                self->error = std::current_exception();
                return 1;
            }
        }
    };

    template <class F>
    void stream(const char *prompt, const int32_t *ids, size_t n, const Params &params, F &on_piece,
                Stats *stats) const
    {
        Trampoline<F> t;
        t.fn = &on_piece;
        specdec_status status = specdec_stream(handle_, prompt, ids, n, &params, &Trampoline<F>::call, &t, stats);
        if (t.error)
            std::rethrow_exception(t.error);
        check(status);
    }

    std::vector<Sequence> sequences(const char *prompt, const int32_t *ids, size_t n, const Params &params,
                                    Stats *stats) const
    {
        size_t count = params.num_return_sequences > 0 ? static_cast<size_t>(params.num_return_sequences) : 1;
        size_t tokens = params.max_new_tokens > 0 ? static_cast<size_t>(params.max_new_tokens) : 1;
        std::vector<int32_t> out(count * tokens);
        std::vector<size_t> lengths(count);
        std::vector<double> scores(count);
        size_t len = 0, got = 0;
        specdec_status status = specdec_generate_sequences(handle_, prompt, ids, n, &params, out.data(), out.size(),
                                                           &len, lengths.data(), scores.data(), lengths.size(),
                                                           &got, stats);
        if (status == SPECDEC_E_BUFFER_TOO_SMALL) {      /* the library said how much it needs: once more */
            out.resize(len > 0 ? len : 1);
            lengths.resize(got > 0 ? got : 1);
            scores.resize(lengths.size());
            status = specdec_generate_sequences(handle_, prompt, ids, n, &params, out.data(), out.size(), &len,
                                                lengths.data(), scores.data(), lengths.size(), &got, stats);
        }
        check(status);
        std::vector<Sequence> result(got);
        size_t at = 0;
        for (size_t i = 0; i < got; i++) {
            result[i].token_ids.assign(out.begin() + static_cast<std::ptrdiff_t>(at),
                                       out.begin() + static_cast<std::ptrdiff_t>(at + lengths[i]));
            result[i].text = decode(result[i].token_ids);
            result[i].score = scores[i];
            at += lengths[i];
        }
        return result;
    }

    std::string transcribed(const float *pcm, size_t n, const char *wav_path, const char *language,
                            const char *task, const Params &params, Stats *stats) const
    {
        std::vector<char> out(256);
        size_t len = 0;
        specdec_status status = specdec_transcribe(handle_, pcm, n, wav_path, language, task, &params, out.data(),
                                                   out.size(), &len, stats);
        if (status == SPECDEC_E_BUFFER_TOO_SMALL) {      /* the library said how much it needs: once more */
            out.resize(len + 1);
            status = specdec_transcribe(handle_, pcm, n, wav_path, language, task, &params, out.data(), out.size(),
                                        &len, stats);
        }
        check(status);
        return std::string(out.data(), len);
    }

    std::vector<int32_t> transcribed_ids(const float *pcm, size_t n, const char *wav_path, const char *language,
                                         const char *task, const Params &params, Stats *stats) const
    {
        std::vector<int32_t> out(params.max_new_tokens > 0 ? static_cast<size_t>(params.max_new_tokens) : 1);
        size_t len = 0;
        specdec_status status = specdec_transcribe_ids(handle_, pcm, n, wav_path, language, task, &params, out.data(),
                                                       out.size(), &len, stats);
        if (status == SPECDEC_E_BUFFER_TOO_SMALL) {      /* audio longer than the window: max_new_tokens a window */
            out.resize(len);
            status = specdec_transcribe_ids(handle_, pcm, n, wav_path, language, task, &params, out.data(),
                                            out.size(), &len, stats);
        }
        check(status);
        out.resize(len);
        return out;
    }

    std::vector<Segment> segmented(const float *pcm, size_t n, const char *wav_path, const char *language,
                                   const char *task, const Params &params, Stats *stats) const
    {
        std::vector<char> text(1024);
        std::vector<double> starts(32), ends(32);
        std::vector<size_t> lengths(32);
        size_t len = 0, count = 0;
        specdec_status status = specdec_transcribe_segments(handle_, pcm, n, wav_path, language, task, &params,
                                                            text.data(), text.size(), &len, starts.data(),
                                                            ends.data(), lengths.data(), lengths.size(), &count,
                                                            stats);
        if (status == SPECDEC_E_BUFFER_TOO_SMALL) {      /* the library said how much it needs: once more */
            text.resize(len + 1 > text.size() ? len + 1 : text.size());
            lengths.resize(count > lengths.size() ? count : lengths.size());
            starts.resize(lengths.size());
            ends.resize(lengths.size());
            status = specdec_transcribe_segments(handle_, pcm, n, wav_path, language, task, &params, text.data(),
                                                 text.size(), &len, starts.data(), ends.data(), lengths.data(),
                                                 lengths.size(), &count, stats);
        }
        check(status);
        std::vector<Segment> out(count);
        size_t at = 0;
        for (size_t i = 0; i < count; i++) {             /* each text is followed by a NUL */
            out[i].start = starts[i];
            out[i].end = ends[i];
            out[i].text.assign(text.data() + at, lengths[i]);
            at += lengths[i] + 1;
        }
        return out;
    }

    specdec_session *handle_;
};

}  // namespace specdec

#endif /* SPECDEC_HPP */
