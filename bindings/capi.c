/* libspecdec: the C side of the C API (include/specdec.h). bindings/build.py pastes this file into the cffi
 * embedding module after `#include "specdec.h"`.
 *
 * What lives here, and why it is C rather than Python:
 *   - specdec_version, specdec_status_name, specdec_stop_reason_name, specdec_params_init: constants; they must not start Python.
 *   - the struct_size checks of the versioned structs (specdec_params, specdec_stats) and the zeroing of
 *     out_stats: done before Python starts, so even a call that cannot start it leaves out_stats zeroed.
 *   - specdec_last_error: thread-local storage in C, so the message survives whatever CPython does with the
 *     thread state of a foreign thread between calls.
 *   - the public entry points: each clears the thread's error, makes sure Python is running (cffi's
 *     embedding logic returns 0 == SPECDEC_OK from a Python function whose interpreter failed to start, so
 *     the start is checked here first), then calls the Python side (bindings/_capi.py), which converts
 *     types and errors and calls specdec.runtime -- all decoding logic lives there.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>

#ifndef SPECDEC_PACKAGE_VERSION
#error "build with bindings/build.py: it defines SPECDEC_PACKAGE_VERSION, SPECDEC_LIBPYTHON, SPECDEC_PYTHON_EXECUTABLE"
#endif

/* extern "Python" functions (defined by cffi from bindings/_capi.py; static, not exported) */
static int _specdec_py_open(const char *export_dir, const char *options_json, specdec_session **out_session);
static int _specdec_py_close(specdec_session *session);
static int _specdec_py_get_info(specdec_session *session, specdec_session_info *out_info);
static int _specdec_py_generate_ids(specdec_session *session, const int32_t *input_ids, size_t n_input,
                                    const specdec_params *params, int32_t *out_ids, size_t out_capacity,
                                    size_t *out_len, specdec_stats *out_stats);
static int _specdec_py_generate_text(specdec_session *session, const char *prompt, const specdec_params *params,
                                     char *out_text, size_t out_capacity, size_t *out_len,
                                     specdec_stats *out_stats);
static int _specdec_py_stream(specdec_session *session, const char *prompt, const int32_t *input_ids,
                              size_t n_input, const specdec_params *params, specdec_piece_callback on_piece,
                              void *user_data, specdec_stats *out_stats);
static int _specdec_py_generate_sequences(specdec_session *session, const char *prompt, const int32_t *input_ids,
                                          size_t n_input, const specdec_params *params, int32_t *out_ids,
                                          size_t out_capacity, size_t *out_len, size_t *out_lengths,
                                          double *out_scores, size_t max_sequences, size_t *out_count,
                                          specdec_stats *out_stats);
static int _specdec_py_decode(specdec_session *session, const int32_t *ids, size_t n_ids, char *out_text,
                              size_t out_capacity, size_t *out_len);
static int _specdec_py_get_audio_info(specdec_session *session, size_t *out_max_samples, int32_t *out_sample_rate);
static int _specdec_py_transcribe(specdec_session *session, const float *pcm, size_t n_samples, const char *wav_path,
                                  const char *language, const char *task, const specdec_params *params,
                                  char *out_text, size_t out_capacity, size_t *out_len, specdec_stats *out_stats);
static int _specdec_py_transcribe_ids(specdec_session *session, const float *pcm, size_t n_samples,
                                      const char *wav_path, const char *language, const char *task,
                                      const specdec_params *params, int32_t *out_ids, size_t out_capacity,
                                      size_t *out_len, specdec_stats *out_stats);
static int _specdec_py_transcribe_segments(specdec_session *session, const float *pcm, size_t n_samples,
                                           const char *wav_path, const char *language, const char *task,
                                           const specdec_params *params, char *out_text, size_t out_capacity,
                                           size_t *out_len, double *out_starts, double *out_ends,
                                           size_t *out_text_lengths, size_t max_segments, size_t *out_count,
                                           specdec_stats *out_stats);

/* ---- the calling thread's last error ----------------------------------------------------------------- */

static __thread char specdec_tls_error[SPECDEC_ERROR_MAX];

/* Called by the Python side (declared in the cffi cdef): `message` is already one line, UTF-8, and shorter
   than SPECDEC_ERROR_MAX; the copy is bounded anyway. */
static void _specdec_set_error(const char *message)
{
    size_t n = message ? strlen(message) : 0;
    if (n >= SPECDEC_ERROR_MAX)
        n = SPECDEC_ERROR_MAX - 1;
    if (n)
        memcpy(specdec_tls_error, message, n);
    specdec_tls_error[n] = '\0';
}

SPECDEC_API const char *specdec_last_error(void)
{
    return specdec_tls_error;
}

/* ---- constants ---------------------------------------------------------------------------------------- */

SPECDEC_API const char *specdec_version(void)
{
    return SPECDEC_PACKAGE_VERSION;
}

SPECDEC_API const char *specdec_status_name(specdec_status status)
{
    switch (status) {
    case SPECDEC_OK: return "SPECDEC_OK";
    case SPECDEC_E_INVALID_ARGUMENT: return "SPECDEC_E_INVALID_ARGUMENT";
    case SPECDEC_E_BUFFER_TOO_SMALL: return "SPECDEC_E_BUFFER_TOO_SMALL";
    case SPECDEC_E_EXPORT: return "SPECDEC_E_EXPORT";
    case SPECDEC_E_PROVIDER: return "SPECDEC_E_PROVIDER";
    case SPECDEC_E_BUSY: return "SPECDEC_E_BUSY";
    case SPECDEC_E_PYTHON: return "SPECDEC_E_PYTHON";
    case SPECDEC_E_RUNTIME: return "SPECDEC_E_RUNTIME";
    case SPECDEC_E_INTERNAL: return "SPECDEC_E_INTERNAL";
    }
    return "SPECDEC_UNKNOWN_STATUS";
}

SPECDEC_API const char *specdec_stop_reason_name(specdec_stop_reason reason)
{
    switch (reason) {
    case SPECDEC_STOP_NONE: return "none";
    case SPECDEC_STOP_EOS: return "eos";
    case SPECDEC_STOP_MAX_NEW_TOKENS: return "max_new_tokens";
    case SPECDEC_STOP_MAX_LENGTH: return "max_length";
    case SPECDEC_STOP_CALLBACK: return "callback";
    }
    return "unknown";
}

/* ---- versioned structs (see "Versioned structs" in specdec.h) --------------------------------------- */

/* 0 when `size` is a struct_size this library can use for `type` (at least `min`); otherwise sets the calling
   thread's error ("function: what is N, problem; fix.") and returns -1. */
static int specdec_bad_size(const char *function, const char *what, size_t size, size_t min, const char *type,
                            const char *fix)
{
    char message[512];
    if (size >= min && size <= SPECDEC_STRUCT_SIZE_MAX)
        return 0;
    if (size == 0)
        snprintf(message, sizeof message, "%s: %s is 0 (not set); %s.", function, what, fix);
    else if (size < min)
        snprintf(message, sizeof message, "%s: %s is %zu, smaller than the smallest %s layout (%zu bytes); %s.",
                 function, what, size, type, min, fix);
    else
        snprintf(message, sizeof message, "%s: %s is %zu, larger than any %s layout (at most %d bytes; never "
                 "set?); %s.", function, what, size, type, SPECDEC_STRUCT_SIZE_MAX, fix);
    _specdec_set_error(message);
    return -1;
}

SPECDEC_API specdec_status specdec_params_init(specdec_params *params, size_t struct_size)
{
    specdec_params d;
    size_t known = struct_size < sizeof d ? struct_size : sizeof d;
    if (params == NULL) {
        _specdec_set_error("specdec_params_init: params is NULL; pass the address of a specdec_params.");
        return SPECDEC_E_INVALID_ARGUMENT;
    }
    if (specdec_bad_size("specdec_params_init", "struct_size", struct_size, SPECDEC_PARAMS_SIZE_MIN,
                         "specdec_params", "pass sizeof(specdec_params)"))
        return SPECDEC_E_INVALID_ARGUMENT;
    memset(&d, 0, sizeof d);
    d.struct_size = struct_size;
    d.max_new_tokens = 64;
    d.gamma = SPECDEC_GAMMA_AUTO;
    d.temperature = 0.0;
    d.top_k = 0;
    d.top_p = 1.0;
    d.lenience = 1.0;
    d.seed = 0;
    d.draft = NULL;                 /* "auto" */
    d.num_beams = 1;                /* API version 4: beam search off */
    d.length_penalty = 1.0;
    d.early_stopping = SPECDEC_EARLY_STOPPING_FALSE;
    d.num_return_sequences = 1;
    d.min_new_tokens = 0;
    d.no_repeat_ngram_size = 0;
    d.candidates = 0;               /* API version 5: chosen by the runtime */
    memcpy(params, &d, known);      /* an older host's struct: only what it has */
    if (struct_size > known)        /* a newer host's struct: its fields this library does not know */
        memset((char *)params + known, 0, struct_size - known);
    return SPECDEC_OK;
}

/* Check the versioned structs a generation call gets, zeroing the stats fields the caller's struct has (so that a
   call failing from here on leaves them zeroed). Returns SPECDEC_OK or SPECDEC_E_INVALID_ARGUMENT (error set; an
   out_stats whose own struct_size is refused is not written). */
static specdec_status specdec_prepare(const char *function, const specdec_params *params, specdec_stats *out_stats)
{
    size_t n;
    if (out_stats) {
        if (specdec_bad_size(function, "out_stats->struct_size", out_stats->struct_size, SPECDEC_STATS_SIZE_MIN,
                             "specdec_stats", "start from specdec_stats_empty(), which sets it to "
                             "sizeof(specdec_stats)"))
            return SPECDEC_E_INVALID_ARGUMENT;
        n = out_stats->struct_size < sizeof *out_stats ? out_stats->struct_size : sizeof *out_stats;
        memset((char *)out_stats + sizeof out_stats->struct_size, 0, n - sizeof out_stats->struct_size);
    }
    if (params && specdec_bad_size(function, "params->struct_size", params->struct_size, SPECDEC_PARAMS_SIZE_MIN,
                                   "specdec_params", "start from specdec_params_default(), which sets it to "
                                   "sizeof(specdec_params)"))
        return SPECDEC_E_INVALID_ARGUMENT;
    return SPECDEC_OK;
}

/* ---- starting Python ---------------------------------------------------------------------------------- */

static char specdec_python_failure[512];    /* why the interpreter could not start ("" if it could) */

static void specdec_start_python(void)
{
    PyConfig config;
    PyStatus status;
    char *argv[1];

    /* Extension modules (numpy, onnxruntime, ...) resolve CPython's symbols globally. A host that dlopen()s
       libspecdec.so with RTLD_LOCAL would leave libpython local and those imports would fail, so make the
       already-loaded libpython global. (The handle is kept: it only pins a library that is loaded anyway.) */
    (void)dlopen(SPECDEC_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);

    if (Py_IsInitialized())         /* the host runs Python itself: cffi uses that interpreter */
        return;
    /* Start CPython as if it were the build environment's own interpreter (SPECDEC_PYTHON_EXECUTABLE, e.g.
       .venv/bin/python): its location is what CPython derives sys.prefix, the virtualenv (pyvenv.cfg) and
       site-packages from. Left alone, CPython would search for its standard library from the host program's
       location and may find another Python's. No signal handlers: the host owns signals. */
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;
    config.parse_argv = 0;
    argv[0] = (char *)"libspecdec";
    status = PyConfig_SetBytesString(&config, &config.program_name, SPECDEC_PYTHON_EXECUTABLE);
    if (!PyStatus_Exception(status))
        status = PyConfig_SetBytesArgv(&config, 1, argv);
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        snprintf(specdec_python_failure, sizeof specdec_python_failure, "%s%s%s",
                 status.func ? status.func : "", status.func ? ": " : "",
                 status.err_msg ? status.err_msg : "CPython failed to initialize");
        return;
    }
    (void)PyEval_SaveThread();      /* release the GIL: every call takes it on its own thread */
}

/* Clear the thread's error and make sure the embedded interpreter runs. Returns 0 when ready. */
static int specdec_enter(const char *function)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    char message[1024];

    specdec_tls_error[0] = '\0';
    pthread_once(&once, specdec_start_python);
    if (specdec_python_failure[0] == '\0' && cffi_start_python() == 0)
        return 0;
    snprintf(message, sizeof message,
             "%s: the embedded Python interpreter (%s) failed to start (%s); unset PYTHONHOME and PYTHONPATH "
             "in the host's environment, or rebuild libspecdec with `python -m specdec.bindings.build` in the "
             "Python environment where specdec is installed.",
             function, SPECDEC_PYTHON_EXECUTABLE,
             specdec_python_failure[0] ? specdec_python_failure : "its traceback is on stderr");
    _specdec_set_error(message);
    return -1;
}

/* The start of an entry point named `function`: check the versioned structs it gets (either may be NULL), then
   clear the thread's error and start Python. Returns SPECDEC_OK, or SPECDEC_E_INVALID_ARGUMENT or SPECDEC_E_PYTHON
   with the error set. */
static specdec_status specdec_begin(const char *function, const specdec_params *params, specdec_stats *out_stats)
{
    specdec_status st = specdec_prepare(function, params, out_stats);
    if (st != SPECDEC_OK)
        return st;
    return specdec_enter(function) ? SPECDEC_E_PYTHON : SPECDEC_OK;
}

/* In a public entry point: specdec_begin under the entry point's own name, returning its status when it fails. */
#define SPECDEC_BEGIN(params, out_stats)                                                                         \
    do {                                                                                                         \
        specdec_status begun_ = specdec_begin(__func__, (params), (out_stats));                                  \
        if (begun_ != SPECDEC_OK)                                                                                \
            return begun_;                                                                                       \
    } while (0)

/* ---- public entry points: clear the error, start Python, call the Python side ------------------------ */

SPECDEC_API specdec_status specdec_open(const char *export_dir, const char *options_json,
                                        specdec_session **out_session)
{
    if (out_session)
        *out_session = NULL;
    SPECDEC_BEGIN(NULL, NULL);
    return (specdec_status)_specdec_py_open(export_dir, options_json, out_session);
}

SPECDEC_API void specdec_close(specdec_session *session)
{
    specdec_tls_error[0] = '\0';
    if (session == NULL)            /* safe whether or not Python ever started */
        return;
    if (specdec_enter("specdec_close"))
        return;
    (void)_specdec_py_close(session);
}

SPECDEC_API specdec_status specdec_get_info(specdec_session *session, specdec_session_info *out_info)
{
    SPECDEC_BEGIN(NULL, NULL);
    return (specdec_status)_specdec_py_get_info(session, out_info);
}

SPECDEC_API specdec_status specdec_generate_ids(specdec_session *session, const int32_t *input_ids,
                                                size_t n_input, const specdec_params *params, int32_t *out_ids,
                                                size_t out_capacity, size_t *out_len, specdec_stats *out_stats)
{
    SPECDEC_BEGIN(params, out_stats);
    return (specdec_status)_specdec_py_generate_ids(session, input_ids, n_input, params, out_ids, out_capacity,
                                                    out_len, out_stats);
}

SPECDEC_API specdec_status specdec_generate_text(specdec_session *session, const char *prompt,
                                                 const specdec_params *params, char *out_text,
                                                 size_t out_capacity, size_t *out_len,
                                                 specdec_stats *out_stats)
{
    SPECDEC_BEGIN(params, out_stats);
    return (specdec_status)_specdec_py_generate_text(session, prompt, params, out_text, out_capacity, out_len,
                                                     out_stats);
}

SPECDEC_API specdec_status specdec_stream(specdec_session *session, const char *prompt,
                                          const int32_t *input_ids, size_t n_input,
                                          const specdec_params *params, specdec_piece_callback on_piece,
                                          void *user_data, specdec_stats *out_stats)
{
    SPECDEC_BEGIN(params, out_stats);
    return (specdec_status)_specdec_py_stream(session, prompt, input_ids, n_input, params, on_piece, user_data,
                                              out_stats);
}

/* ---- API version 4: beam search's sequences, and ids to text ------------------------------------------- */

SPECDEC_API specdec_status specdec_generate_sequences(specdec_session *session, const char *prompt,
                                                      const int32_t *input_ids, size_t n_input,
                                                      const specdec_params *params, int32_t *out_ids,
                                                      size_t out_capacity, size_t *out_len, size_t *out_lengths,
                                                      double *out_scores, size_t max_sequences,
                                                      size_t *out_count, specdec_stats *out_stats)
{
    SPECDEC_BEGIN(params, out_stats);
    return (specdec_status)_specdec_py_generate_sequences(session, prompt, input_ids, n_input, params, out_ids,
                                                          out_capacity, out_len, out_lengths, out_scores,
                                                          max_sequences, out_count, out_stats);
}

SPECDEC_API specdec_status specdec_decode(specdec_session *session, const int32_t *ids, size_t n_ids,
                                          char *out_text, size_t out_capacity, size_t *out_len)
{
    SPECDEC_BEGIN(NULL, NULL);
    return (specdec_status)_specdec_py_decode(session, ids, n_ids, out_text, out_capacity, out_len);
}

/* ---- API version 6: Whisper exports, audio in -------------------------------------------------------------- */

SPECDEC_API specdec_status specdec_get_audio_info(specdec_session *session, size_t *out_max_samples,
                                                  int32_t *out_sample_rate)
{
    SPECDEC_BEGIN(NULL, NULL);
    return (specdec_status)_specdec_py_get_audio_info(session, out_max_samples, out_sample_rate);
}

SPECDEC_API specdec_status specdec_transcribe(specdec_session *session, const float *pcm, size_t n_samples,
                                              const char *wav_path, const char *language, const char *task,
                                              const specdec_params *params, char *out_text, size_t out_capacity,
                                              size_t *out_len, specdec_stats *out_stats)
{
    SPECDEC_BEGIN(params, out_stats);
    return (specdec_status)_specdec_py_transcribe(session, pcm, n_samples, wav_path, language, task, params,
                                                  out_text, out_capacity, out_len, out_stats);
}

SPECDEC_API specdec_status specdec_transcribe_ids(specdec_session *session, const float *pcm, size_t n_samples,
                                                  const char *wav_path, const char *language, const char *task,
                                                  const specdec_params *params, int32_t *out_ids,
                                                  size_t out_capacity, size_t *out_len, specdec_stats *out_stats)
{
    SPECDEC_BEGIN(params, out_stats);
    return (specdec_status)_specdec_py_transcribe_ids(session, pcm, n_samples, wav_path, language, task, params,
                                                      out_ids, out_capacity, out_len, out_stats);
}

/* ---- API version 7: a Whisper transcript as segments with times ------------------------------------------------ */

SPECDEC_API specdec_status specdec_transcribe_segments(specdec_session *session, const float *pcm,
                                                       size_t n_samples, const char *wav_path, const char *language,
                                                       const char *task, const specdec_params *params,
                                                       char *out_text, size_t out_capacity, size_t *out_len,
                                                       double *out_starts, double *out_ends,
                                                       size_t *out_text_lengths, size_t max_segments,
                                                       size_t *out_count, specdec_stats *out_stats)
{
    SPECDEC_BEGIN(params, out_stats);
    return (specdec_status)_specdec_py_transcribe_segments(session, pcm, n_samples, wav_path, language, task, params,
                                                           out_text, out_capacity, out_len, out_starts, out_ends,
                                                           out_text_lengths, max_segments, out_count, out_stats);
}
