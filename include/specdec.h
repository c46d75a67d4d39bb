/*
 * specdec.h -- C API of specdec: exact speculative decoding (Leviathan et al., 2023) of a T5 target/draft
 * pair exported by `specdec-export`, running on ONNX Runtime; and of a Whisper pair, which transcribes audio
 * (specdec_transcribe, API version 6; of any length, and into segments with times, API version 7).
 *
 * This header is the contract. Plain C99; usable from C++ (extern "C"). Link with libspecdec.so, which
 * `python -m specdec.bindings.build` (or `specdec-build-capi`) writes to build/; see bindings/README.md.
 * libspecdec.so runs specdec's Python runtime in-process (an embedded CPython started on the first call that
 * needs it); the host program contains no Python code and needs nothing in its environment: the library
 * records at build time where its Python environment is.
 *
 * Conventions that hold for every function below unless it says otherwise
 * ----------------------------------------------------------------------------------------------------------
 *  - Status: functions return a specdec_status. SPECDEC_OK (0) is success; anything else is a failure and
 *    specdec_last_error() then returns a one-line message of the form "function: problem; fix.". A failed
 *    call has no effect on the session: the next call on it works as if the failed call never happened.
 *    No function aborts, exits or throws on bad input. The library prints nothing (except that CPython and
 *    cffi print a traceback on stderr if the embedded interpreter itself cannot start).
 *  - Ownership: the library never takes ownership of caller memory and never keeps a caller pointer after
 *    the call returns. Every `const char *` the library returns is owned by the library (never free it);
 *    how long it stays valid is stated per function. Output buffers are provided by the caller.
 *  - Strings are NUL-terminated UTF-8, both ways.
 *  - Token ids are int32_t (the vocabulary fits easily); the runtime checks them against the export's
 *    vocabulary: the model's rows, which may be more than the ids its tokenizer makes (every real T5 has
 *    32,128 rows for 32,100 tokens). A padded row's id is valid in and out, and decodes to no text.
 *  - Versioned structs: specdec_params and specdec_stats begin with `size_t struct_size`, the struct's size as
 *    the host was compiled (sizeof). From API version 3 on their fields are only ever appended: never removed,
 *    reordered or retyped. The library reads and writes only the fields that lie wholly inside the caller's
 *    struct_size, so a host compiled against an older header keeps working with a newer library (a params
 *    field its struct lacks takes its default; a stats field its struct lacks is not written), and a host
 *    compiled against a newer header works with an older library (which ignores the params fields it does not
 *    know and leaves the stats fields it does not know as the caller set them). The host must set struct_size:
 *    start from specdec_params_default() and specdec_stats_empty(), which set it. A struct_size of 0, below
 *    SPECDEC_PARAMS_SIZE_MIN / SPECDEC_STATS_SIZE_MIN or above SPECDEC_STRUCT_SIZE_MAX is
 *    SPECDEC_E_INVALID_ARGUMENT, and then that struct is neither read nor written. (specdec_session_info is not
 *    versioned: the library writes all of it.)
 *  - Threads: any function may be called from any thread, including threads the library has never seen.
 *    Different sessions are independent and run concurrently (ONNX Runtime runs without the Python GIL).
 *    One session may be shared by several threads: calls on the same session are serialized inside the
 *    library (each waits for the one in progress), they neither fail nor interleave (the one exception: a
 *    call on a session from inside that session's own stream callback fails with SPECDEC_E_BUSY).
 *  - Errors are per thread: specdec_last_error() reports the last failure of the calling thread only.
 *  - Process: one embedded CPython per process, started by the first call that needs it (concurrent first
 *    calls are safe), without signal handlers, never finalized (its memory goes at process exit). If the
 *    host already runs CPython, that interpreter is used. Leave PYTHONHOME and PYTHONPATH unset in the
 *    host's environment. Do not keep using the library in a child after fork().
 */
#ifndef SPECDEC_H
#define SPECDEC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SPECDEC_API __attribute__((visibility("default")))
#else
#define SPECDEC_API
#endif

/* Version of this C API (the header's contract): incremented whenever a function signature, a struct layout, the
   meaning of a field or the meaning of a status changes. The library's package version is specdec_version().
     1: first version.
     2: specdec_stats: verify_s and sampling_s replaced by target_s (sampling is fused into the decoder graphs:
        there are no separate sampler runs to time), so the struct's layout changed -- recompile against this
        header; ort_runs counts gamma + 1 runs per speculative iteration instead of 2 * gamma + 2.
        specdec_params.lenience now also applies at temperature 0 (see its comment; 1 is still exact).
     3: specdec_params and specdec_stats are versioned: `size_t struct_size` comes first (see "Versioned
        structs" above; from now on fields are only appended, so hosts built against this header or a later
        one never need recompiling for a layout change). specdec_params: gamma may be SPECDEC_GAMMA_AUTO (-1,
        the new default: chosen each round from measured acceptance and costs); new field `draft` (the draft
        source by name: "auto", the default, "none", "lookup", a draft model's name, or a chain such as
        "lookup,draft"). specdec_stats: new per-source counters (target_only_rounds, lookup_*, model_*,
        chain_*). specdec_params_default() is now an inline function over the new specdec_params_init()
        (so no struct is returned by value across the library boundary), and specdec_stats_empty() is new.
        Recompile hosts built against version 1 or 2.
     4: beam search and logits processors. specdec_params appends num_beams, length_penalty, early_stopping (a
        specdec_early_stopping), num_return_sequences, min_new_tokens and no_repeat_ngram_size (hosts built
        against version 3 need no recompiling: their struct_size leaves these out, so they take their defaults,
        which are version 3's behaviour). New functions: specdec_generate_sequences (the num_return_sequences
        best sequences of a beam search, best first, with their scores) and specdec_decode (token ids to text).
        specdec_stream with num_beams > 1 is SPECDEC_E_INVALID_ARGUMENT (a beam search cannot stream).
     5: specdec_params appends `candidates` (continuations a lookup round verifies in one target run; 0, the
        default, lets the runtime choose; hosts built against version 3 or 4 need no recompiling).
     6: Whisper exports. New functions: specdec_transcribe and specdec_transcribe_ids (audio in, as float32 PCM
        samples or a WAV file's path; text or ids out) and specdec_get_audio_info (the window a session's audio
        must fit in; 0 for a text export). No struct changed (hosts built against version 3 to 5 need no
        recompiling). specdec_generate_ids, _text, specdec_stream and specdec_generate_sequences on a Whisper
        session are SPECDEC_E_INVALID_ARGUMENT (it takes audio, not a prompt).
     7: Whisper audio of any length and timestamps. specdec_transcribe and _ids take audio longer than the
        encoder's window (it was SPECDEC_E_INVALID_ARGUMENT): it is decoded window by window, up to
        SPECDEC_MAX_AUDIO_SECONDS; params.max_new_tokens then counts per window, so a longer recording may need
        a larger output buffer (SPECDEC_E_BUFFER_TOO_SMALL says how large). New function:
        specdec_transcribe_segments (the transcript as segments with start and end times, for a model with
        timestamp tokens) and specdec_stop_reason_name. No struct changed (hosts built against version 3 to 6 need no recompiling). */
#define SPECDEC_API_VERSION 7

/* params.gamma: let the runtime choose the number of guesses each round (0 .. the export's gamma_max) from the
   acceptance and the costs it measures. The default. */
#define SPECDEC_GAMMA_AUTO (-1)

/* Largest struct_size the library accepts for a versioned struct: far above any real layout, so that a struct
   whose struct_size was never set (stack garbage) is refused rather than trusted. */
#define SPECDEC_STRUCT_SIZE_MAX 4096

/* Longest audio specdec_transcribe, _ids and _segments take, in seconds (4 h: 230,400,000 samples at 16 kHz); longer
   is SPECDEC_E_INVALID_ARGUMENT, refused before the samples are read. */
#define SPECDEC_MAX_AUDIO_SECONDS 14400

/* Longest message specdec_last_error() returns, in bytes including the NUL; longer ones are cut (at a
   UTF-8 character boundary) and end with "...". */
#define SPECDEC_ERROR_MAX 2048

/* ---- types (bindings/build.py also reads this block, between the markers, as cffi declarations) -------- */
/* @cffi-types-begin */

/* Status of a call. Values are stable: new codes may be added, existing ones never change. */
typedef enum specdec_status {
    SPECDEC_OK = 0,
    /* A NULL pointer where one is required, an invalid params field (e.g. gamma above the export's
       gamma_max, top_p outside (0, 1], a NaN temperature), a bad options_json, an empty prompt, token ids
       outside the vocabulary, a prompt longer than the export's max_length, a session handle that is not
       open. Nothing was generated. */
    SPECDEC_E_INVALID_ARGUMENT = 1,
    /* The caller's output buffer is too small. The generation did run: *out_len holds the length that is
       needed (token count; or text bytes without the NUL, so out_capacity must be at least *out_len + 1;
       specdec_generate_sequences also sets *out_count, the number of sequences, and specdec_transcribe_segments
       the number of segments) and *out_stats (if given) is filled, but nothing was written to the output
       buffers. Calling again with large enough buffers and the same arguments (same seed) gives the same
       output. */
    SPECDEC_E_BUFFER_TOO_SMALL = 2,
    /* The export directory is missing, incomplete, corrupt (a checksum differs), of another format
       version, or ONNX Runtime cannot load one of its graphs. */
    SPECDEC_E_EXPORT = 3,
    /* The requested execution provider is unknown or not available in the installed onnxruntime. */
    SPECDEC_E_PROVIDER = 4,
    /* A call on a session from inside that same session's stream callback (it would deadlock). */
    SPECDEC_E_BUSY = 5,
    /* The embedded Python runtime could not start or could not import specdec (the message says why;
       typically the Python environment the library was built for has moved: rebuild the library).
       Every later call fails the same way. */
    SPECDEC_E_PYTHON = 6,
    /* ONNX Runtime failed while generating (e.g. out of device memory). The session stays usable. */
    SPECDEC_E_RUNTIME = 7,
    /* An unexpected failure inside the library (a bug): the message names the exception. */
    SPECDEC_E_INTERNAL = 8
} specdec_status;

/* Why a generation stopped (specdec_stats.stop_reason). */
typedef enum specdec_stop_reason {
    SPECDEC_STOP_NONE = 0,            /* no generation ran (e.g. the call failed before generating) */
    SPECDEC_STOP_EOS = 1,             /* the end-of-sequence token was generated (it is the last output id) */
    SPECDEC_STOP_MAX_NEW_TOKENS = 2,  /* params.max_new_tokens tokens were generated */
    SPECDEC_STOP_MAX_LENGTH = 3,      /* the export's max_length was reached */
    SPECDEC_STOP_CALLBACK = 4         /* the stream callback returned nonzero */
} specdec_stop_reason;

/* specdec_params.early_stopping: when a beam search ends (transformers' `early_stopping`). Stored in an
   int32_t field, so the struct's layout does not depend on the size of an enum. */
typedef enum specdec_early_stopping {
    SPECDEC_EARLY_STOPPING_FALSE = 0,   /* the default (transformers' False): once num_beams beams have
                                           finished, stop when the best running beam, scored at its current
                                           length, cannot beat the worst of them (a heuristic)                */
    SPECDEC_EARLY_STOPPING_TRUE = 1,    /* stop as soon as num_beams beams have finished                      */
    SPECDEC_EARLY_STOPPING_NEVER = 2    /* transformers' "never": as FALSE, but with length_penalty > 0 the
                                           running beam is scored at max_new_tokens (the longest it could get),
                                           so the search stops only when no beam can still win                */
} specdec_early_stopping;

/* Opaque session: one loaded export directory (the target's and the draft's ONNX Runtime sessions, with the
   sampling heads fused into their decoder graphs; KV caches; device buffers). Created by specdec_open,
   destroyed by specdec_close; the handle value means nothing to the caller. */
typedef struct specdec_session specdec_session;

/* Generation parameters (a versioned struct: see "Versioned structs" above). Always start from
   specdec_params_default() and change fields: it sets struct_size and gives every field its default. The
   library validates every field on every call (invalid -> SPECDEC_E_INVALID_ARGUMENT, nothing generated).
   Same params and seed -> same tokens, on any thread, provided that draft and gamma are fixed (not "auto" /
   SPECDEC_GAMMA_AUTO): at temperature > 0 an auto choice depends on measured timings, so seeded sampled output
   is then not reproducible. Greedy output (with lenience 1) is the target's greedy output whatever the draft
   and gamma, auto included. */
typedef struct specdec_params {
    size_t struct_size;      /* sizeof(specdec_params) as the host was compiled; set by
                                specdec_params_default(). Always first.                                   */
    /* ---- API version 2 fields (every layout has them) ---- */
    int32_t max_new_tokens;  /* >= 1. Default 64. Output is at most this many tokens (an EOS included).   */
    int32_t gamma;           /* draft tokens per target call: SPECDEC_GAMMA_AUTO (-1, the default: chosen
                                each round from measured acceptance and costs), or fixed in 0..gamma_max of
                                the export (see specdec_get_info); 0 = target-only decoding. Greedy output
                                (with lenience 1) does not depend on gamma; sampled output does.          */
    double temperature;      /* finite, >= 0. 0 = greedy (default). With lenience 1 the output
                                distribution is exactly the target's at this temperature/top_k/top_p,
                                whatever the draft.                                                        */
    int32_t top_k;           /* >= 0; 0 = no top-k filter (default).                                       */
    double top_p;            /* in (0, 1]; 1 = no nucleus filter (default).                               */
    double lenience;         /* l, in (0, 1]; 1 = exact (default). Lower keeps more draft tokens and is no
                                longer exact (Leviathan et al., A.5); it means one of two things:
                                  temperature > 0: q is multiplied by l -- a guess x is kept with
                                                   probability min(1, p(x) / (l q(x))), and after a
                                                   rejection the next token is drawn from
                                                   norm(max(0, p - l q)).
                                  temperature 0:   a guess x is kept iff p(x) >= l * max p, where p is the
                                                   target's distribution before it becomes one-hot (the
                                                   top_k/top_p-filtered softmax at temperature 1): l = 1 is
                                                   exact greedy (only the argmax is kept), 0.5 also keeps
                                                   a guess at least half as likely as the argmax.
                                With l < 1 the output depends on gamma and on the draft, also when greedy. */
    uint64_t seed;           /* random seed for sampling (unused when greedy). Default 0.                  */
    /* ---- appended in API version 3 ---- */
    const char *draft;       /* the draft source, by name (NUL-terminated UTF-8, read during the call only;
                                the library keeps no pointer to it). NULL or "auto" (the default): each
                                round the best of none, lookup, the draft model and lookup,draft, from
                                measured acceptance and costs. "none": target only (as gamma 0). "lookup":
                                copies from the prompt, the output so far and the datastore (no model). A draft model's
                                name: "draft" (an export may hold more, e.g. "mid"). A chain, lowest level
                                first, "," or "+" between levels: "lookup,draft", "draft,mid" (each level
                                verifies the one below; "lookup" only first). An unknown name or a
                                malformed chain is SPECDEC_E_INVALID_ARGUMENT with a one-line message
                                naming the choices; the session stays usable.                              */
    /* ---- appended in API version 4: beam search (transformers' semantics; greedy only) and the logits
       processors min_new_tokens and no_repeat_ngram_size. A value this library refuses is
       SPECDEC_E_INVALID_ARGUMENT with a one-line message; the session stays usable. ---- */
    int32_t num_beams;       /* 1..16. Default 1: no beam search (greedy or sampled speculative decoding as
                                above). > 1: beam search over num_beams beams, deterministic: temperature
                                must be 0 (top_k, top_p, lenience and seed are not used), draft must be
                                NULL/"auto", "none" or a draft model's name (no lookup, no chain), gamma
                                SPECDEC_GAMMA_AUTO (speculate only where it pays) or fixed (0: target
                                only). The sequences do not depend on draft and gamma (their scores only
                                to float32 rounding). specdec_generate_ids
                                and _text return the best sequence; specdec_generate_sequences returns
                                num_return_sequences of them with their scores; specdec_stream refuses
                                num_beams > 1.                                                             */
    double length_penalty;   /* finite. Default 1. A finished sequence's score is its sum of log-probabilities
                                divided by length ** length_penalty (length: generated tokens, the EOS
                                included); > 0 favours longer sequences, < 0 shorter ones. Beam search only. */
    int32_t early_stopping;  /* a specdec_early_stopping: SPECDEC_EARLY_STOPPING_FALSE (0, the default),
                                _TRUE (1) or _NEVER (2); any other value is refused. Beam search only.      */
    int32_t num_return_sequences; /* 1..num_beams. Default 1. How many of the best finished sequences
                                specdec_generate_sequences returns (specdec_generate_ids and _text return
                                the best one whatever this is).                                            */
    int32_t min_new_tokens;  /* >= 0. Default 0. The EOS id is banned until this many tokens were generated
                                (transformers' min_new_tokens). Applies to every decoding: beam search,
                                greedy and sampled (where the target's and the draft's distributions are
                                processed alike, so sampling stays exact for the processed target).        */
    int32_t no_repeat_ngram_size; /* >= 0. Default 0 (off). > 0: no n-gram of this many tokens occurs twice
                                in the output (a token that would repeat one is banned; transformers'
                                no_repeat_ngram_size). Applies to every decoding, as min_new_tokens.       */
    /* ---- appended in API version 5: several candidates verified in one target run ---- */
    int64_t candidates;      /* 0..8 (8 bytes wide so that the struct has no trailing padding). Default 0: chosen by the runtime from measured acceptance and run costs
                                (1 where a wider run does not pay, as on the CPUs measured so far). 1: one
                                candidate a lookup round. B > 1: a lookup round verifies up to B copied
                                continuations in one target run, merged into a token tree (exact at every
                                temperature; not with lenience < 1 or min_new_tokens / no_repeat_ngram_size,
                                which verify one). Needs an export of format 6.                            */
} specdec_params;

/* What one generation did and where its time went (seconds, wall clock). A versioned struct (see "Versioned
   structs" above): start from specdec_stats_empty(), which sets struct_size; the library zeroes the fields it
   knows at the start of every call that takes it. Sampling runs inside the decoder graphs (fused heads), and a
   draft model's k guesses are one ONNX Runtime run: a round with a draft model is 1 draft run + 1 target run, also
   with min_new_tokens / no_repeat_ngram_size; a weight-only int8 draft, and any draft on the capturable graphs,
   runs once per guess (k + 1 runs a round).
   encoder_s + draft_s + target_s + host_s = total_s. */
typedef struct specdec_stats {
    size_t struct_size;             /* sizeof(specdec_stats) as the host was compiled; set by
                                       specdec_stats_empty(). Always first; the library never writes it.   */
    /* ---- API version 2 fields (every layout has them) ---- */
    int64_t target_calls;           /* target runs: verify passes (or single steps when gamma = 0)        */
    int64_t draft_calls;            /* draft runs (one per proposal; one per guess in the cases above)    */
    int64_t proposed;               /* draft tokens offered for verification                              */
    int64_t accepted;               /* of those, kept                                                     */
    int64_t new_tokens;             /* tokens generated                                                   */
    int64_t ort_runs;               /* every ONNX Runtime session run: encoders, draft runs, target runs  */
    double acceptance_rate;         /* accepted / proposed (0 when nothing was proposed); not alpha:
                                       docs/reference/stats.md says how the two differ                     */
    double tokens_per_target_call;  /* new_tokens / target_calls (0 when there was no target call)        */
    double encoder_s;               /* encoder runs (once per model and generation)                       */
    double draft_s;                 /* draft runs: decoder step + its fused sampling head (draws q, x)    */
    double target_s;                /* target runs: decoder over k + 1 tokens + the fused accept/residual
                                       head (which guesses are kept, and the next token)                  */
    double host_s;                  /* everything outside ONNX Runtime runs (Python, tokenizer, binding) */
    double total_s;                 /* whole generation                                                   */
    specdec_stop_reason stop_reason;
    /* ---- appended in API version 3: where the guesses came from (the runtime's Stats.sources, summed by
       kind). Every round is one target run of exactly one kind, so on a text export target_only_rounds +
       lookup_rounds + model_rounds = target_calls; on a Whisper export the decoder prompt's prefill run (and the
       language detection's, when no language is given) are target runs that are no round. lookup_proposed + model_proposed = proposed and lookup_accepted +
       model_accepted = accepted. A round yields its accepted guesses plus one token of the target's, so a
       kind's tokens are its rounds + accepted (before the output is cut after an EOS). Useful with draft
       "auto", which picks a kind per round. ---- */
    int64_t target_only_rounds;     /* rounds without guesses: gamma 0, draft "none", a lookup that found no
                                       match, the last token before max_new_tokens, or an auto choice      */
    int64_t lookup_rounds;          /* rounds whose guesses the lookup copied (from the prompt, the output
                                       or the datastore), verified by the target                          */
    int64_t lookup_proposed;        /* guesses the lookup offered the target                               */
    int64_t lookup_accepted;        /* of those, kept                                                      */
    int64_t model_rounds;           /* rounds whose guesses came from a draft model: alone ("draft") or the
                                       top level of a chain ("lookup,draft", "draft,mid")                  */
    int64_t model_proposed;         /* guesses draft models offered the target                             */
    int64_t model_accepted;         /* of those, kept                                                      */
    int64_t chain_proposed;         /* inside chains: guesses a lower level offered the model above it (not
                                       the target; e.g. the lookup's guesses under "lookup,draft")         */
    int64_t chain_accepted;         /* of those, kept by that model                                        */
} specdec_stats;

/* Facts about an open session (specdec_get_info). */
typedef struct specdec_session_info {
    int32_t gamma_max;      /* largest params.gamma this export accepts                                    */
    int32_t max_length;     /* longest prompt, and longest output, in tokens                               */
    int32_t vocab_size;     /* token ids are 0 .. vocab_size - 1 (the model's rows; the tokenizer may make
                               fewer: a real T5's makes 32,100 of its 32,128)                          */
    int32_t eos_token_id;   /* the end-of-sequence id                                                      */
    char provider[16];      /* NUL-terminated: the provider in use, "cpu", "cuda" or "tensorrt"            */
} specdec_session_info;

/* Stream callback: called once per accepted piece (one target run: 1 .. gamma + 1 tokens), in order, on the
   thread that called specdec_stream, before specdec_stream returns.
     token_ids, n_tokens: the piece's token ids (n_tokens >= 1).
     text, text_len:      the text those tokens add to the output so far (NUL-terminated UTF-8, text_len bytes
                          without the NUL; may be empty, e.g. for special tokens). Concatenating every piece's
                          text gives the text of the whole output.
     user_data:           the pointer given to specdec_stream, untouched.
   Both pointers are owned by the library and valid only until the callback returns: copy what you keep.
   Return 0 to continue, nonzero to stop: the generation then ends (stop_reason SPECDEC_STOP_CALLBACK) and
   specdec_stream returns SPECDEC_OK. The callback may call the library on other sessions; calls on the same
   session fail with SPECDEC_E_BUSY (specdec_close on it is ignored). It must not unwind through the
   library (no longjmp; C++: do not let an exception escape the callback). */
typedef int (*specdec_piece_callback)(const int32_t *token_ids, size_t n_tokens, const char *text,
                                      size_t text_len, void *user_data);

/* @cffi-types-end */

/* The smallest struct_size the library accepts for each versioned struct: struct_size and the fields of API
   version 2, which every layout has. A field lies inside the caller's struct iff offsetof(field) +
   sizeof(field) <= struct_size. */
#define SPECDEC_PARAMS_SIZE_MIN offsetof(specdec_params, draft)
#define SPECDEC_STATS_SIZE_MIN offsetof(specdec_stats, target_only_rounds)

/* ---- library ------------------------------------------------------------------------------------------- */

/* The specdec package version this library was built from, e.g. "0.1.0". Static storage: never free, valid
   for the life of the process. Does not start Python; thread-safe; cannot fail. */
SPECDEC_API const char *specdec_version(void);

/* The calling thread's last error: a one-line, NUL-terminated UTF-8 message ("" if the last specdec call on
   this thread succeeded, or there was none). Every specdec call except specdec_last_error, specdec_version,
   specdec_status_name, specdec_params_init (and so specdec_params_default) and specdec_stats_empty clears it
   when it starts and sets it when it fails (specdec_params_init sets it when it fails, too).
   Owned by the library (thread-local storage): valid until the calling thread makes its next call that
   clears it, or exits; copy it to keep it. Never NULL. Thread-safe: other threads' failures never show here. */
SPECDEC_API const char *specdec_last_error(void);

/* The enumerator name of a status, e.g. "SPECDEC_E_EXPORT" ("SPECDEC_UNKNOWN_STATUS" for values not in the
   enum). Static storage; thread-safe; cannot fail. */
SPECDEC_API const char *specdec_status_name(specdec_status status);

/* The name of a stop reason as the Python API gives it: "none", "eos", "max_new_tokens", "max_length" or
   "callback" ("unknown" for values not in the enum). Static storage; thread-safe; cannot fail. */
SPECDEC_API const char *specdec_stop_reason_name(specdec_stop_reason reason);

/* ---- sessions ------------------------------------------------------------------------------------------ */

/* Open an export directory made by specdec-export: reads and checks the manifest and the sha256 of every
   file, then creates the ONNX Runtime sessions and device buffers once (each generation reuses them).
     export_dir:   path to the directory (required).
     options_json: NULL or "" for the defaults, or a JSON object with any of these load options (the Python
                   runtime's, with the same checks; docs/guides/runtime.md, "Loading", has the table)
                     "provider": "auto" (default), "cpu", "cuda", "tensorrt"
                     "threads":  intra-op threads, integer >= 0 (default 0: the target takes SPECDEC_THREADS
                                 when set, else ONNX Runtime's default; each draft model one thread)
                     "draft":    path of another export directory to take the draft model from (same target
                                 tokenizer); default: the draft exported together with the target
                     "datastore": path of a datastore for the lookup (specdec-datastore build --export DIR),
                                 or "none"; default: the export's own, if it has one
                     "graph_capture": true to run the export's capturable graphs (default false): an export
                                 made with specdec-export --graph-capture (else SPECDEC_E_EXPORT) and provider
                                 "cuda" (each width's step captured as a CUDA graph) or "cpu" (the same graphs,
                                 uncaptured); beam search and batches then fail (they need the eager graphs), and
                                 "draft" does not combine with it. See docs/guides/runtime.md, "Graph capture on
                                 a GPU".
                   An unknown key or a wrongly typed value is SPECDEC_E_INVALID_ARGUMENT.
     out_session:  required; receives the new session on success, NULL on failure.
   Returns SPECDEC_OK, SPECDEC_E_INVALID_ARGUMENT, SPECDEC_E_EXPORT, SPECDEC_E_PROVIDER, SPECDEC_E_PYTHON or
   SPECDEC_E_INTERNAL. The caller owns the session and must release it with specdec_close.
   Thread-safe: any number of threads may open sessions at the same time. The first call in the process that
   needs Python starts it (typically 0.5 to 2 s, once); opening an export takes about as long as loading
   its ONNX graphs. */
SPECDEC_API specdec_status specdec_open(const char *export_dir, const char *options_json,
                                        specdec_session **out_session);

/* Release a session and everything it holds. specdec_close(NULL) does nothing and is always safe, any
   number of times. If another thread is in a call on the session, specdec_close waits for that call to
   finish. Calling it from inside that session's own stream callback is refused (the session stays open;
   the calling thread's last error says so).
   After specdec_close(s) returns, `s` is invalid: using it again, or closing it again, is undefined
   behaviour. (This implementation detects a closed handle and fails with SPECDEC_E_INVALID_ARGUMENT, but
   do not rely on it.) Thread-safe with respect to other sessions. */
SPECDEC_API void specdec_close(specdec_session *session);

/* Fill *out_info (required) with facts about the session's export.
   Returns SPECDEC_OK or SPECDEC_E_INVALID_ARGUMENT. Thread-safe (serialized per session). */
SPECDEC_API specdec_status specdec_get_info(specdec_session *session, specdec_session_info *out_info);

/* ---- generation ---------------------------------------------------------------------------------------- */

/* Write the default parameters into the first struct_size bytes of *params and set params->struct_size to
   struct_size (pass sizeof(specdec_params); specdec_params_default() does). The defaults are the Python
   API's: max_new_tokens 64, gamma SPECDEC_GAMMA_AUTO, draft NULL ("auto"), temperature 0 (greedy), top_k 0,
   top_p 1, lenience 1, seed 0; num_beams 1 (no beam search), length_penalty 1, early_stopping
   SPECDEC_EARLY_STOPPING_FALSE, num_return_sequences 1, min_new_tokens 0, no_repeat_ngram_size 0, candidates 0.
   Bytes past the fields this library knows (a newer header's fields) are zeroed.
   Returns SPECDEC_OK, or SPECDEC_E_INVALID_ARGUMENT (params NULL, or struct_size below
   SPECDEC_PARAMS_SIZE_MIN or above SPECDEC_STRUCT_SIZE_MAX; *params untouched). Does not start Python;
   thread-safe; leaves the last error alone when it succeeds. */
SPECDEC_API specdec_status specdec_params_init(specdec_params *params, size_t struct_size);

/* The default parameters (see specdec_params_init), with struct_size = sizeof(specdec_params) of the header
   the host is compiled with. Inline, so the struct never crosses the library boundary by value. Cannot fail. */
static inline specdec_params specdec_params_default(void)
{
    specdec_params p;
    memset(&p, 0, sizeof p);
    (void)specdec_params_init(&p, sizeof p);
    return p;
}

/* An empty specdec_stats to pass as out_stats: all zero (stop_reason SPECDEC_STOP_NONE) and struct_size =
   sizeof(specdec_stats). Inline; does not call the library. */
static inline specdec_stats specdec_stats_empty(void)
{
    specdec_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    return s;
}

/* Token ids in, token ids out.
     session:              required.
     input_ids, n_input:   the encoder input (n_input >= 1; usually ending with the EOS id, as the tokenizer
                           would produce it); the caller keeps ownership, read only during the call.
     params:               NULL for specdec_params_default(); else its struct_size must be set (see
                           "Versioned structs"); read only during the call.
     out_ids, out_capacity: caller buffer of out_capacity int32_t. A buffer of params.max_new_tokens ids is
                           always large enough. out_ids may be NULL only when out_capacity is 0 (then the
                           call only measures: it returns SPECDEC_E_BUFFER_TOO_SMALL and the length).
     out_len:              required; receives the number of generated ids (also on BUFFER_TOO_SMALL).
     out_stats:            optional (NULL); its struct_size must be set (specdec_stats_empty()). Filled on
                           SPECDEC_OK and SPECDEC_E_BUFFER_TOO_SMALL, zeroed on any other failure
                           (stop_reason SPECDEC_STOP_NONE) -- except when its own struct_size is invalid:
                           then it is not touched.
   The output excludes the decoder start token and stops after the EOS id if one is generated. A Whisper
   session takes audio, not a prompt: this function, specdec_generate_text, specdec_stream and
   specdec_generate_sequences refuse it (SPECDEC_E_INVALID_ARGUMENT); use specdec_transcribe.
   Returns SPECDEC_OK, SPECDEC_E_BUFFER_TOO_SMALL, SPECDEC_E_INVALID_ARGUMENT, SPECDEC_E_BUSY,
   SPECDEC_E_RUNTIME, SPECDEC_E_PYTHON or SPECDEC_E_INTERNAL; on any failure nothing is written to
   out_ids. Thread-safe (serialized per session). */
SPECDEC_API specdec_status specdec_generate_ids(specdec_session *session, const int32_t *input_ids,
                                                size_t n_input, const specdec_params *params, int32_t *out_ids,
                                                size_t out_capacity, size_t *out_len, specdec_stats *out_stats);

/* Text in, text out, through the export's tokenizer (same ids as specdec_generate_ids on the tokenizer's
   encoding of the prompt; special tokens are dropped from the text).
     prompt:               required, non-empty UTF-8.
     out_text, out_capacity: caller buffer of out_capacity bytes; on success it holds the text and a NUL.
                           out_text may be NULL only when out_capacity is 0 (measure only).
     out_len:              required; receives the text length in bytes, without the NUL (the buffer must
                           hold *out_len + 1 bytes).
   Other arguments, statuses, ownership and threading as specdec_generate_ids. */
SPECDEC_API specdec_status specdec_generate_text(specdec_session *session, const char *prompt,
                                                 const specdec_params *params, char *out_text,
                                                 size_t out_capacity, size_t *out_len,
                                                 specdec_stats *out_stats);

/* Generate and hand each accepted piece to on_piece as soon as it is verified (see specdec_piece_callback).
   Give exactly one input: a prompt (text; input_ids NULL and n_input 0) or input_ids (prompt NULL).
     on_piece:  required. user_data: passed to it untouched (may be NULL).
     out_stats: optional (struct_size set); filled on SPECDEC_OK (including a stop by the callback), zeroed
                on a failure (untouched when its struct_size is invalid).
   The pieces' token ids, concatenated, are exactly what specdec_generate_ids returns for the same input,
   params and seed. Returns SPECDEC_OK, SPECDEC_E_INVALID_ARGUMENT, SPECDEC_E_BUSY, SPECDEC_E_RUNTIME,
   SPECDEC_E_PYTHON or SPECDEC_E_INTERNAL. On a failure after some pieces were delivered, those pieces stand
   but the output is incomplete. Thread-safe (serialized per session: the session is held until the last
   callback has returned). params.num_beams > 1 is SPECDEC_E_INVALID_ARGUMENT (a beam search cannot stream:
   every beam may still lose until the search ends); use specdec_generate_sequences. */
SPECDEC_API specdec_status specdec_stream(specdec_session *session, const char *prompt,
                                          const int32_t *input_ids, size_t n_input,
                                          const specdec_params *params, specdec_piece_callback on_piece,
                                          void *user_data, specdec_stats *out_stats);

/* ---- beam search: several sequences, with scores (API version 4) --------------------------------------- */

/* Generate and return the params->num_return_sequences best sequences, best first, with their scores. Meant for
   beam search (params->num_beams > 1); with num_beams 1 it returns the one sequence specdec_generate_ids
   returns, with a NaN score (there is no beam score).
   Give exactly one input, as for specdec_stream: a prompt (text; input_ids NULL and n_input 0) or input_ids
   (prompt NULL).
     params:         as for specdec_generate_ids (NULL: the defaults, i.e. num_beams 1).
     out_ids, out_capacity:  caller buffer of out_capacity int32_t; receives every sequence's ids, concatenated,
                     best first (sequence i starts after the out_lengths[0..i-1] ids of the ones before it;
                     like specdec_generate_ids' output each excludes the decoder start token and ends after
                     the EOS id if it has one). A buffer of num_return_sequences * max_new_tokens ids is always
                     large enough. out_ids may be NULL only when out_capacity is 0.
     out_len:        required; receives the total number of ids of all sequences (also on BUFFER_TOO_SMALL).
     out_lengths, out_scores, max_sequences:  caller arrays of max_sequences elements; out_lengths[i] receives
                     sequence i's length in ids, out_scores[i] its score: its sum of log-probabilities divided by
                     length ** params->length_penalty (transformers' sequences_scores); out_scores may be NULL
                     (scores not wanted). max_sequences >= params->num_return_sequences is always enough.
                     out_lengths may be NULL only when max_sequences is 0 (measure only).
     out_count:      required; receives the number of sequences (num_return_sequences; 1 when num_beams is 1),
                     also on BUFFER_TOO_SMALL.
     out_stats:      optional, as for specdec_generate_ids (stats of the whole search; new_tokens is the best
                     sequence's length).
   The best sequence (index 0) is exactly what specdec_generate_ids returns for the same input and params;
   specdec_decode gives any sequence's text. When *out_count > max_sequences or *out_len > out_capacity the
   call returns SPECDEC_E_BUFFER_TOO_SMALL with *out_len, *out_count and out_stats filled and nothing else
   written; calling again with large enough buffers gives the same sequences (beam search is deterministic).
   Returns SPECDEC_OK, SPECDEC_E_BUFFER_TOO_SMALL, SPECDEC_E_INVALID_ARGUMENT, SPECDEC_E_BUSY,
   SPECDEC_E_RUNTIME, SPECDEC_E_PYTHON or SPECDEC_E_INTERNAL; on any other failure nothing is written to
   out_ids, out_lengths or out_scores. Ownership and threading as specdec_generate_ids. */
SPECDEC_API specdec_status specdec_generate_sequences(specdec_session *session, const char *prompt,
                                                      const int32_t *input_ids, size_t n_input,
                                                      const specdec_params *params, int32_t *out_ids,
                                                      size_t out_capacity, size_t *out_len, size_t *out_lengths,
                                                      double *out_scores, size_t max_sequences,
                                                      size_t *out_count, specdec_stats *out_stats);

/* Token ids to text through the export's tokenizer, special tokens dropped: the text specdec_generate_text
   would return for these ids (e.g. one sequence of specdec_generate_sequences).
     ids, n_ids:     the ids (each 0 .. vocab_size - 1); ids may be NULL only when n_ids is 0 (gives "").
     out_text, out_capacity, out_len:  as for specdec_generate_text (NUL-terminated; out_capacity 0 measures).
   Returns SPECDEC_OK, SPECDEC_E_BUFFER_TOO_SMALL, SPECDEC_E_INVALID_ARGUMENT (NULL session or out_len, an id
   outside the vocabulary), SPECDEC_E_BUSY, SPECDEC_E_PYTHON or SPECDEC_E_INTERNAL. Thread-safe (serialized
   per session). */
SPECDEC_API specdec_status specdec_decode(specdec_session *session, const int32_t *ids, size_t n_ids,
                                          char *out_text, size_t out_capacity, size_t *out_len);

/* ---- Whisper exports: audio in (API version 6; any length and segments, API version 7) ---------------------- */

/* The audio a session takes: *out_max_samples receives the encoder's window in samples (480000 for a real
   Whisper's 30 s at 16 kHz; a smaller export has less), the audio one encoder run sees: longer audio is decoded
   window by window (see specdec_transcribe); *out_sample_rate receives the sample rate it takes (16000). Both
   receive 0 for a text (T5) export, which takes no audio. Either pointer may be NULL (that value is not wanted).
   Returns SPECDEC_OK, SPECDEC_E_INVALID_ARGUMENT (NULL or closed session), SPECDEC_E_BUSY, SPECDEC_E_PYTHON or
   SPECDEC_E_INTERNAL. Thread-safe (serialized per session). */
SPECDEC_API specdec_status specdec_get_audio_info(specdec_session *session, size_t *out_max_samples,
                                                  int32_t *out_sample_rate);

/* Transcribe (or translate) audio with a Whisper export: audio in, text out (special tokens dropped), through
   the same runtime as Python's SpeculativeDecoder.generate(audio=..., language=..., task=...), which gives the
   same tokens for the same audio, params and seed.
   Give exactly one input: samples (pcm and n_samples; wav_path NULL) or a WAV file (wav_path; pcm NULL and
   n_samples 0).
     pcm, n_samples:  mono float32 samples at 16 kHz, in [-1, 1]; 1 <= n_samples <= SPECDEC_MAX_AUDIO_SECONDS *
                      16000 (checked before the samples are read); every sample finite. The caller keeps
                      ownership; read only during the call. Audio shorter than the window (specdec_get_audio_info)
                      is padded with silence, as Whisper pads it. Longer audio (API version 7; before, it was
                      SPECDEC_E_INVALID_ARGUMENT) is transcribed window by window: a window ends in a pause
                      where its audio has one (padded with silence after it), and the next starts before the speech
                      after it; a window without a pause goes on as Whisper's own long-form transcription does (a
                      model with timestamp tokens: the next window starts where the last segment the window cut
                      began; without them: the window cut at its quietest 20 ms near its end; the Whisper guide has
                      the details). Each window is an ordinary
                      request (exact speculative decoding; the k-th window seeded with params.seed + k), and the
                      text is the windows' segments joined by spaces.
     wav_path:        path of a RIFF/WAVE file (NUL-terminated UTF-8), read and checked by the library during the
                      call: PCM 8/16/24/32-bit, IEEE float 32/64-bit, or WAVE_FORMAT_EXTENSIBLE holding either;
                      1 to 64 channels (mixed to mono by their mean); exactly 16000 Hz; at most
                      SPECDEC_MAX_AUDIO_SECONDS and 2 GiB. A file that is missing, unreadable, not PCM WAV, damaged,
                      at another rate or too long is SPECDEC_E_INVALID_ARGUMENT with a one-line message naming the
                      file, the problem and the fix.
     language:        NULL: detected (one target run over the start of transcript; the language token with the
                      largest logit, as transformers' detect_language; for audio longer than the window, in each
                      window); else a language code the model knows, "en" or "<|en|>". An English-only model takes
                      NULL only.
     task:            NULL or "transcribe" (the default), or "translate" (into English). An English-only model
                      takes NULL or "transcribe" only.
     params:          as for specdec_generate_ids (NULL: the defaults; with num_beams > 1 the output is the best
                      sequence of the beam search). Whisper's suppressed tokens apply to the target's and every
                      draft's distribution alike, so sampling with lenience 1 stays exact. max_new_tokens counts per
                      window.
     out_text, out_capacity, out_len, out_stats:  as for specdec_generate_text (out_capacity 0 measures; for audio
                      longer than the window the stats are every window's added up, stop_reason the last one's).
   An unknown language or task, NaN or infinite samples, audio longer than SPECDEC_MAX_AUDIO_SECONDS, and calling it
   on a text (T5) session are SPECDEC_E_INVALID_ARGUMENT with a one-line message naming the problem and the fix; the
   session stays usable. Statuses, ownership and threading as specdec_generate_ids. */
SPECDEC_API specdec_status specdec_transcribe(specdec_session *session, const float *pcm, size_t n_samples,
                                              const char *wav_path, const char *language, const char *task,
                                              const specdec_params *params, char *out_text, size_t out_capacity,
                                              size_t *out_len, specdec_stats *out_stats);

/* As specdec_transcribe, token ids out: out_ids, out_capacity, out_len as for specdec_generate_ids (out_capacity 0
   measures). Audio within the window: a buffer of params.max_new_tokens ids is always large enough; the ids
   exclude Whisper's prompt (start of transcript, language, task, no timestamps) and end after the end-of-text id
   if one is generated; specdec_decode gives their text, which is what specdec_transcribe returns. Longer audio:
   the text tokens of every window's segments, in order (no timestamp or end-of-text ids), up to max_new_tokens
   per window, so the size needed depends on the transcript: on SPECDEC_E_BUFFER_TOO_SMALL, *out_len says it. */
SPECDEC_API specdec_status specdec_transcribe_ids(specdec_session *session, const float *pcm, size_t n_samples,
                                                  const char *wav_path, const char *language, const char *task,
                                                  const specdec_params *params, int32_t *out_ids,
                                                  size_t out_capacity, size_t *out_len, specdec_stats *out_stats);

/* As specdec_transcribe, the transcript out as segments with times (API version 7): Python's
   SpeculativeDecoder.generate(audio=..., timestamps=True).segments. Needs a model with timestamp tokens (the
   export records them; the official Whisper checkpoints have them): for one without, the call is
   SPECDEC_E_INVALID_ARGUMENT ("no timestamp tokens"; specdec_transcribe gives its text). The decoder's prompt
   leaves out no-timestamps, and transformers' timestamp rules apply to the target's and every draft's
   distribution alike (sampling with lenience 1 stays exact). Any audio length, as for specdec_transcribe.
   Inputs, language, task, params and out_stats as for specdec_transcribe. The outputs (segment i, in order):
     out_text, out_capacity, out_len:  every segment's text (special tokens dropped, surrounding spaces stripped)
                      followed by a NUL, one after the other: segment i's NUL-terminated text starts at byte
                      sum over j < i of (out_text_lengths[j] + 1). *out_len (required) receives the bytes of them
                      all without the last NUL (0 when there is no segment), so, as for specdec_generate_text, the
                      buffer must hold *out_len + 1 bytes (with no segment it receives ""). out_text may be NULL
                      only when out_capacity is 0 (measure only).
     out_starts, out_ends, out_text_lengths, max_segments:  caller arrays of max_segments elements: out_starts[i]
                      and out_ends[i] receive segment i's start and end in seconds from the start of the audio
                      (rounded to 0.01 s; the model's timestamps are 0.02 s apart), out_text_lengths[i] its text's
                      length in bytes without the NUL. out_ends[i] is NaN for a segment the audio's end cut (opened
                      by a timestamp, never closed; only where the audio fits in one window: longer audio closes
                      such a segment at its window's end). Each may be NULL only when max_segments is 0 (measure
                      only).
     out_count:       required; receives the number of segments (0 when the transcript is empty).
   When *out_count > max_segments or *out_len + 1 > out_capacity the call returns SPECDEC_E_BUFFER_TOO_SMALL with
   *out_len, *out_count and out_stats filled and nothing else written; calling again with large enough buffers and
   the same arguments (same seed; a fixed draft and gamma when sampling) gives the same segments. Returns
   SPECDEC_OK, SPECDEC_E_BUFFER_TOO_SMALL, SPECDEC_E_INVALID_ARGUMENT, SPECDEC_E_BUSY, SPECDEC_E_RUNTIME,
   SPECDEC_E_PYTHON or SPECDEC_E_INTERNAL; on any other failure nothing is written to out_text, out_starts,
   out_ends or out_text_lengths. Ownership and threading as specdec_generate_ids. */
SPECDEC_API specdec_status specdec_transcribe_segments(specdec_session *session, const float *pcm,
                                                       size_t n_samples, const char *wav_path, const char *language,
                                                       const char *task, const specdec_params *params,
                                                       char *out_text, size_t out_capacity, size_t *out_len,
                                                       double *out_starts, double *out_ends,
                                                       size_t *out_text_lengths, size_t max_segments,
                                                       size_t *out_count, specdec_stats *out_stats);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPECDEC_H */
