/* Bad arguments from C: every case must return a status and a one-line message, never crash, and leave the
 * session working (checked after each failure by regenerating reference outputs).
 *
 *   capi_errors EXPORT_DIR MISSING_DIR CORRUPT_DIR TAMPERED_DIR [CAPTURE_DIR]
 *
 * CAPTURE_DIR: the same pair exported with --graph-capture (its greedy and sampled outputs are EXPORT_DIR's).
 *
 * Prints "ok NAME" or "not ok NAME: detail" per case (tests/bindings/test_capi_errors.py runs each as a test), plus
 * "version: ...", "defaults: ...", "info: ..." and "sources ...: ..." lines that the test compares with the Python
 * API. The versioned-struct cases (struct_size, older and newer layouts) and the draft-source cases are at the end.
 * CAPI_ERRORS_VERBOSE=1 also prints every status and message.
 */
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec.h"

static const char *export_dir, *missing_dir, *corrupt_dir, *tampered_dir, *capture_dir;
static specdec_session *session;                  /* the shared session every case checks afterwards */
static const int32_t prompt[] = {20, 30, 1};      /* "w20 w30" */
#define N_PROMPT 3
#define PROMPT_TEXT "w20 w30"
#define MAX_NEW 12
static int32_t ref_greedy[MAX_NEW], ref_sampled[MAX_NEW];
static size_t n_greedy, n_sampled;
static char ref_text[4096];

#include "capi_cases.h"

static specdec_params sampled_params(void)
{
    specdec_params p = greedy_params();
    p.temperature = 3.0;
    p.top_k = 40;
    p.top_p = 0.98;
    p.seed = 7;
    return p;
}

/* the failed call's status and message are as expected */
static int expect_failure(const char *what, specdec_status got, specdec_status want, const char *function,
                          const char *needle)
{
    return one_line_refusal(what, got, want, function, needle, "CAPI_ERRORS_VERBOSE");
}

/* a session on `dir` opened with options_json gives the reference greedy output (and, if `sampled`, the
   reference sampled one), then is closed */
static int opens_dir_with_reference(const char *dir, const char *options, const char *what, int sampled)
{
    specdec_session *s = NULL;
    int32_t out[MAX_NEW], out_sampled[MAX_NEW];
    size_t len = 0, len_sampled = n_sampled;
    specdec_params p = greedy_params();
    specdec_status st;
    char error[1024];
    CHECK(specdec_open(dir, options, &s) == SPECDEC_OK, "open with %s: %s", what, specdec_last_error());
    st = specdec_generate_ids(s, prompt, N_PROMPT, &p, out, MAX_NEW, &len, NULL);
    p = sampled_params();
    if (st == SPECDEC_OK && sampled)
        st = specdec_generate_ids(s, prompt, N_PROMPT, &p, out_sampled, MAX_NEW, &len_sampled, NULL);
    snprintf(error, sizeof error, "%s", specdec_last_error());
    specdec_close(s);
    CHECK(st == SPECDEC_OK, "generate with %s: %s", what, error);
    CHECK(len == n_greedy && !memcmp(out, ref_greedy, len * sizeof *out), "output differs with %s", what);
    CHECK(!sampled || (len_sampled == n_sampled && !memcmp(out_sampled, ref_sampled, len_sampled * sizeof *out)),
          "sampled output differs with %s", what);
    return 1;
}

/* a session opened with options_json gives the reference greedy output, then is closed */
static int opens_with_reference(const char *options, const char *what)
{
    return opens_dir_with_reference(export_dir, options, what, 0);
}

/* the shared session still gives the reference outputs */
static int healthy(const char *after)
{
    int32_t out[MAX_NEW];
    char text[4096];
    size_t len = 0;
    specdec_params p = greedy_params();
    specdec_status st = specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW, &len, NULL);
    CHECK(st == SPECDEC_OK, "after %s: greedy generate failed: %s %s", after, specdec_status_name(st),
          specdec_last_error());
    CHECK(len == n_greedy && !memcmp(out, ref_greedy, len * sizeof *out), "after %s: greedy output changed", after);
    CHECK(specdec_last_error()[0] == '\0', "after %s: last error not cleared by a successful call", after);
    p = sampled_params();
    st = specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW, &len, NULL);
    CHECK(st == SPECDEC_OK && len == n_sampled && !memcmp(out, ref_sampled, len * sizeof *out),
          "after %s: sampled output changed (%s)", after, specdec_status_name(st));
    p = greedy_params();
    st = specdec_generate_text(session, PROMPT_TEXT, &p, text, sizeof text, &len, NULL);
    CHECK(st == SPECDEC_OK && !strcmp(text, ref_text), "after %s: text output changed (%s)", after,
          specdec_status_name(st));
    return 1;
}

/* ---- open --------------------------------------------------------------------------------------------- */

static int case_open_null_out_session(void)
{
    CALL(expect_failure("open", specdec_open(export_dir, NULL, NULL), SPECDEC_E_INVALID_ARGUMENT, "specdec_open",
                        "out_session"));
    return healthy("open with NULL out_session");
}

static int case_open_null_export_dir(void)
{
    specdec_session *s = (specdec_session *)&s;     /* must be reset to NULL */
    CALL(expect_failure("open", specdec_open(NULL, NULL, &s), SPECDEC_E_INVALID_ARGUMENT, "specdec_open",
                        "export_dir"));
    CHECK(s == NULL, "out_session not set to NULL on failure");
    return healthy("open with NULL export_dir");
}

static int case_open_missing_export(void)
{
    specdec_session *s = NULL;
    CALL(expect_failure("open", specdec_open(missing_dir, NULL, &s), SPECDEC_E_EXPORT, "specdec_open",
                        "does not exist"));
    CHECK(s == NULL, "out_session set on failure");
    CALL(expect_failure("open \"\"", specdec_open("", NULL, &s), SPECDEC_E_EXPORT, "specdec_open", "manifest"));
    return healthy("open of a missing export");
}

static int case_open_corrupt_manifest(void)
{
    specdec_session *s = NULL;
    CALL(expect_failure("open", specdec_open(corrupt_dir, NULL, &s), SPECDEC_E_EXPORT, "specdec_open", "corrupt"));
    CHECK(s == NULL, "out_session set on failure");
    return healthy("open of a corrupt export");
}

static int case_open_tampered_file(void)
{
    specdec_session *s = NULL;
    CALL(expect_failure("open", specdec_open(tampered_dir, NULL, &s), SPECDEC_E_EXPORT, "specdec_open", "sha256"));
    return healthy("open of a tampered export");
}

static int case_open_bad_options(void)
{
    static const char *bad[][2] = {
        {"{", "not valid JSON"}, {"[1, 2]", "not a JSON object"}, {"{\"bogus\": 1}", "unknown key"},
        {"{\"threads\": \"two\"}", "integer"}, {"{\"threads\": -1}", ">= 0"}, {"{\"provider\": 3}", "string"},
        {"{\"threads\": true}", "integer"}, {"{\"graph_capture\": 1}", "boolean"},
        {"{\"graph_capture\": \"true\"}", "boolean"},
    };
    size_t i;
    specdec_session *s = NULL;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CALL(expect_failure(bad[i][0], specdec_open(export_dir, bad[i][0], &s), SPECDEC_E_INVALID_ARGUMENT,
                            "specdec_open", bad[i][1]));
        CHECK(s == NULL, "out_session set on failure");
    }
    return healthy("bad options_json");
}

static int case_open_bad_provider(void)
{
    specdec_session *s = NULL;
    specdec_status st;
    CALL(expect_failure("provider gpu", specdec_open(export_dir, "{\"provider\": \"gpu\"}", &s), SPECDEC_E_PROVIDER,
                        "specdec_open", "unknown provider"));
    st = specdec_open(export_dir, "{\"provider\": \"tensorrt\"}", &s);
    if (st == SPECDEC_OK)           /* an onnxruntime with TensorRT: nothing to refuse */
        specdec_close(s);
    else
        CALL(expect_failure("provider tensorrt", st, SPECDEC_E_PROVIDER, "specdec_open", "not available"));
    return healthy("an unavailable provider");
}

static int case_open_draft_option(void)
{
    /* "draft": another export's draft (here the same export's, so outputs stay the reference) */
    char options[4096];
    specdec_session *s = NULL;
    snprintf(options, sizeof options, "{\"provider\": \"cpu\", \"draft\": \"%s\"}", export_dir);
    CALL(opens_with_reference(options, "the draft option"));
    snprintf(options, sizeof options, "{\"draft\": \"%s\"}", missing_dir);
    CALL(expect_failure("missing draft", specdec_open(export_dir, options, &s), SPECDEC_E_EXPORT, "specdec_open",
                        "does not exist"));
    CHECK(s == NULL, "out_session set on failure");
    return healthy("the draft option");
}

static int case_open_datastore_option(void)
{
    /* "datastore": "none" opens (the tiny export has no datastore: outputs stay the reference); a missing file and
       a file that is not a datastore are SPECDEC_E_EXPORT with one line naming the problem */
    char options[4096];
    specdec_session *s = NULL;
    CALL(opens_with_reference("{\"datastore\": \"none\"}", "datastore none"));
    snprintf(options, sizeof options, "{\"datastore\": \"%s/no-such.sdds\"}", missing_dir);
    CALL(expect_failure("missing datastore", specdec_open(export_dir, options, &s), SPECDEC_E_EXPORT, "specdec_open",
                        "does not exist"));
    snprintf(options, sizeof options, "{\"datastore\": \"%s/manifest.json\"}", export_dir);
    CALL(expect_failure("not a datastore", specdec_open(export_dir, options, &s), SPECDEC_E_EXPORT, "specdec_open",
                        "not a specdec datastore"));
    CHECK(s == NULL, "out_session set on failure");
    return healthy("the datastore option");
}

static int case_open_graph_capture_option(void)
{
    /* "graph_capture": false opens the eager graphs; true on an export without the capturable graphs is
       SPECDEC_E_EXPORT with one line saying how to re-export; on CAPTURE_DIR (the pair exported with them) the
       greedy and sampled outputs are the reference, and beam search is refused in one line */
    char options[4096];
    specdec_session *s = NULL;
    specdec_params p = greedy_params();
    int32_t out[MAX_NEW];
    size_t len = 0;
    CALL(opens_with_reference("{\"provider\": \"cpu\", \"graph_capture\": false}", "graph_capture false"));
    CALL(expect_failure("no capturable graphs", specdec_open(export_dir, "{\"provider\": \"cpu\", "
                        "\"graph_capture\": true}", &s), SPECDEC_E_EXPORT, "specdec_open",
                        "has no capturable graphs; re-export it with specdec-export ... --graph-capture"));
    CHECK(s == NULL, "out_session set on failure");
    if (capture_dir != NULL) {
        snprintf(options, sizeof options, "{\"provider\": \"cpu\", \"threads\": 1, \"graph_capture\": true}");
        CALL(opens_dir_with_reference(capture_dir, options, "graph_capture true", 1));
        CHECK(specdec_open(capture_dir, options, &s) == SPECDEC_OK, "open: %s", specdec_last_error());
        p.num_beams = 2;
        p.draft = "none";
        if (!expect_failure("beams under graph capture", specdec_generate_ids(s, prompt, N_PROMPT, &p, out, MAX_NEW,
                                                                              &len, NULL),
                            SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "graph_capture")) {
            specdec_close(s);
            return 0;
        }
        specdec_close(s);
    }
    return healthy("the graph_capture option");
}

static int case_long_message_truncated(void)
{
    /* a 3 KiB path of short components (no ENAMETOOLONG): the message quoting it must be cut */
    static char path[3 * SPECDEC_ERROR_MAX / 2];
    specdec_session *s = NULL;
    size_t len, i;
    for (i = 0; i + 1 < sizeof path; i++)
        path[i] = i % 64 == 0 ? '/' : 'x';
    path[sizeof path - 1] = '\0';
    CALL(expect_failure("open", specdec_open(path, NULL, &s), SPECDEC_E_EXPORT, "specdec_open", "export directory"));
    len = strlen(specdec_last_error());
    CHECK(len <= SPECDEC_ERROR_MAX - 1 && len > SPECDEC_ERROR_MAX - 8, "message length %zu for a %zu-byte path", len,
          strlen(path));
    CHECK(!strcmp(specdec_last_error() + len - 3, "..."), "a cut message does not end with ...");
    return healthy("a long message");
}

static int case_open_unreadable_path(void)
{
    /* a path the OS refuses outright (ENAMETOOLONG) is an export error too */
    static char path[3 * SPECDEC_ERROR_MAX];
    specdec_session *s = NULL;
    memset(path, 'x', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = '\0';
    CALL(expect_failure("open", specdec_open(path, NULL, &s), SPECDEC_E_EXPORT, "specdec_open", NULL));
    return healthy("an unreadable path");
}

/* ---- sessions and generate_ids -------------------------------------------------------------------------- */

static int case_null_session(void)
{
    int32_t out[MAX_NEW];
    char text[64];
    size_t len;
    specdec_session_info info;
    CALL(expect_failure("generate_ids", specdec_generate_ids(NULL, prompt, N_PROMPT, NULL, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "session is NULL"));
    CALL(expect_failure("generate_text", specdec_generate_text(NULL, "w5", NULL, text, sizeof text, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", "session is NULL"));
    CALL(expect_failure("get_info", specdec_get_info(NULL, &info), SPECDEC_E_INVALID_ARGUMENT, "specdec_get_info",
                        "session is NULL"));
    CALL(expect_failure("stream", specdec_stream(NULL, "w5", NULL, 0, NULL, NULL, NULL, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_stream", "session is NULL"));
    CALL(expect_failure("get_info", specdec_get_info(session, NULL), SPECDEC_E_INVALID_ARGUMENT, "specdec_get_info",
                        "out_info"));
    return healthy("NULL session");
}

static int case_null_input_ids(void)
{
    int32_t out[MAX_NEW];
    size_t len;
    CALL(expect_failure("ids", specdec_generate_ids(session, NULL, 4, NULL, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "input_ids is NULL"));
    CALL(expect_failure("ids", specdec_generate_ids(session, NULL, 0, NULL, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "empty"));
    CALL(expect_failure("ids", specdec_generate_ids(session, prompt, 0, NULL, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "empty"));
    return healthy("NULL/empty input_ids");
}

static int case_bad_token_ids(void)
{
    int32_t out[MAX_NEW], big[65], bad[] = {5, 999, 1}, negative[] = {5, -3, 1};
    size_t len, i;
    for (i = 0; i < 65; i++)
        big[i] = 5;
    CALL(expect_failure("ids", specdec_generate_ids(session, bad, 3, NULL, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "999"));
    CALL(expect_failure("ids", specdec_generate_ids(session, negative, 3, NULL, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "-3"));
    CALL(expect_failure("ids", specdec_generate_ids(session, big, 65, NULL, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "max_length"));
    return healthy("token ids outside the vocabulary / too long");
}

static int case_null_outputs(void)
{
    int32_t out[MAX_NEW];
    size_t len;
    CALL(expect_failure("out_len", specdec_generate_ids(session, prompt, N_PROMPT, NULL, out, MAX_NEW, NULL, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "out_len"));
    CALL(expect_failure("out_ids", specdec_generate_ids(session, prompt, N_PROMPT, NULL, NULL, 8, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "out_ids"));
    CALL(expect_failure("out_text", specdec_generate_text(session, "w5", NULL, NULL, 8, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", "out_text"));
    CALL(expect_failure("text out_len", specdec_generate_text(session, "w5", NULL, (char *)out, 8, NULL, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", "out_len"));
    return healthy("NULL outputs");
}

static int case_buffer_too_small_ids(void)
{
    int32_t out[MAX_NEW];
    size_t len = 0, i;
    specdec_stats stats = specdec_stats_empty();
    specdec_params p = greedy_params();
    for (i = 0; i < MAX_NEW; i++)
        out[i] = -7;
    CALL(expect_failure("small", specdec_generate_ids(session, prompt, N_PROMPT, &p, out, 3, &len, &stats),
                        SPECDEC_E_BUFFER_TOO_SMALL, "specdec_generate_ids", "out_capacity"));
    CHECK(len == n_greedy, "required length %zu, expected %zu", len, n_greedy);
    CHECK(stats.new_tokens == (int64_t)n_greedy && stats.stop_reason != SPECDEC_STOP_NONE,
          "stats not filled on BUFFER_TOO_SMALL");
    for (i = 0; i < MAX_NEW; i++)
        CHECK(out[i] == -7, "the buffer was written on BUFFER_TOO_SMALL");
    len = 99;
    CALL(expect_failure("measure", specdec_generate_ids(session, prompt, N_PROMPT, &p, NULL, 0, &len, NULL),
                        SPECDEC_E_BUFFER_TOO_SMALL, "specdec_generate_ids", NULL));
    CHECK(len == n_greedy, "measured length %zu, expected %zu", len, n_greedy);
    CHECK(specdec_generate_ids(session, prompt, N_PROMPT, &p, out, len, &len, NULL) == SPECDEC_OK,
          "retry with the reported length failed: %s", specdec_last_error());
    CHECK(!memcmp(out, ref_greedy, len * sizeof *out), "retry gave other ids");
    return healthy("too-small id buffer");
}

static int case_buffer_too_small_text(void)
{
    char out[4096];
    size_t len = 0, need;
    specdec_params p = greedy_params();
    memset(out, '#', sizeof out);
    CALL(expect_failure("small", specdec_generate_text(session, PROMPT_TEXT, &p, out, 2, &len, NULL),
                        SPECDEC_E_BUFFER_TOO_SMALL, "specdec_generate_text", "out_capacity"));
    CHECK(len == strlen(ref_text), "required length %zu, expected %zu", len, strlen(ref_text));
    CHECK(out[0] == '#' && out[1] == '#', "the buffer was written on BUFFER_TOO_SMALL");
    need = len;
    if (need > 0)   /* exactly the text length leaves no room for the NUL */
        CALL(expect_failure("no room for NUL", specdec_generate_text(session, PROMPT_TEXT, &p, out, need, &len, NULL),
                            SPECDEC_E_BUFFER_TOO_SMALL, "specdec_generate_text", NULL));
    CHECK(specdec_generate_text(session, PROMPT_TEXT, &p, out, need + 1, &len, NULL) == SPECDEC_OK,
          "retry with *out_len + 1 failed: %s", specdec_last_error());
    CHECK(len == need && !strcmp(out, ref_text), "retry gave other text");
    return healthy("too-small text buffer");
}

/* ---- invalid params (each field) --------------------------------------------------------------------------- */

static int invalid_params(const char *field, specdec_params p)
{
    int32_t out[MAX_NEW];
    char text[256];
    size_t len;
    char what[128];
    snprintf(what, sizeof what, "invalid %s", field);
    CALL(expect_failure(what, specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", field));
    CALL(expect_failure(what, specdec_generate_text(session, "w5", &p, text, sizeof text, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", field));
    return healthy(what);
}

#define WITH(field, value)                                                                                      \
    do {                                                                                                        \
        specdec_params p = greedy_params();                                                                     \
        p.field = value;                                                                                        \
        CALL(invalid_params(#field, p));                                                                        \
    } while (0)

static int case_invalid_gamma(void) { WITH(gamma, 9); WITH(gamma, -2); return 1; }   /* -1 is auto */
static int case_invalid_max_new_tokens(void) { WITH(max_new_tokens, 0); WITH(max_new_tokens, -5); return 1; }
static int case_invalid_temperature(void)
{
    WITH(temperature, -1.0); WITH(temperature, NAN); WITH(temperature, INFINITY); return 1;
}
static int case_invalid_top_k(void) { WITH(top_k, -1); return 1; }
static int case_invalid_top_p(void) { WITH(top_p, 0.0); WITH(top_p, 1.5); WITH(top_p, NAN); return 1; }
static int case_invalid_lenience(void) { WITH(lenience, 0.0); WITH(lenience, 2.0); return 1; }

/* ---- text prompts ---------------------------------------------------------------------------------------- */

static int case_bad_prompt(void)
{
    char out[256];
    size_t len;
    CALL(expect_failure("NULL", specdec_generate_text(session, NULL, NULL, out, sizeof out, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", "prompt is NULL"));
    CALL(expect_failure("empty", specdec_generate_text(session, "", NULL, out, sizeof out, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", "empty"));
    CALL(expect_failure("blank", specdec_generate_text(session, "   ", NULL, out, sizeof out, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", "empty"));
    CALL(expect_failure("utf-8", specdec_generate_text(session, "w5 \xff\xfe", NULL, out, sizeof out, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", "UTF-8"));
    return healthy("bad prompts");
}

/* ---- stream ---------------------------------------------------------------------------------------------- */

typedef struct {
    int pieces;
    int stop_after;
    specdec_session *other;
    specdec_status nested, nested_other;
    char nested_message[SPECDEC_ERROR_MAX];
    char close_message[SPECDEC_ERROR_MAX];
} stream_state;

static int counting(const int32_t *ids, size_t n, const char *text, size_t text_len, void *user)
{
    stream_state *st = (stream_state *)user;
    (void)ids; (void)n; (void)text; (void)text_len;
    return ++st->pieces >= st->stop_after;
}

static int reentrant(const int32_t *ids, size_t n, const char *text, size_t text_len, void *user)
{
    stream_state *st = (stream_state *)user;
    int32_t out[MAX_NEW];
    size_t len;
    (void)ids; (void)n; (void)text; (void)text_len;
    if (st->pieces++ == 0) {
        st->nested = specdec_generate_ids(session, prompt, N_PROMPT, NULL, out, MAX_NEW, &len, NULL);
        snprintf(st->nested_message, sizeof st->nested_message, "%s", specdec_last_error());
        specdec_close(session);                              /* refused: we are inside its callback */
        snprintf(st->close_message, sizeof st->close_message, "%s", specdec_last_error());
        {
            specdec_params p = greedy_params();
            st->nested_other = specdec_generate_ids(st->other, prompt, N_PROMPT, &p, out, MAX_NEW, &len, NULL);
        }
    }
    return 0;
}

static int case_stream_bad_arguments(void)
{
    stream_state st;
    memset(&st, 0, sizeof st);
    st.stop_after = 1000;
    CALL(expect_failure("callback", specdec_stream(session, "w5", NULL, 0, NULL, NULL, &st, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_stream", "on_piece"));
    CALL(expect_failure("no input", specdec_stream(session, NULL, NULL, 0, NULL, counting, &st, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_stream", "exactly one"));
    CALL(expect_failure("two inputs", specdec_stream(session, "w5", prompt, N_PROMPT, NULL, counting, &st, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_stream", "exactly one"));
    CALL(expect_failure("NULL ids", specdec_stream(session, NULL, NULL, 3, NULL, counting, &st, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_stream", "input_ids is NULL"));
    {
        specdec_params p = greedy_params();
        p.gamma = 99;
        CALL(expect_failure("gamma", specdec_stream(session, NULL, prompt, N_PROMPT, &p, counting, &st, NULL),
                            SPECDEC_E_INVALID_ARGUMENT, "specdec_stream", "gamma"));
    }
    CHECK(st.pieces == 0, "the callback ran for a failed call");
    return healthy("bad stream arguments");
}

static int case_stream_stopped_by_callback(void)
{
    stream_state st;
    specdec_stats stats = specdec_stats_empty();
    specdec_params p = greedy_params();
    memset(&st, 0, sizeof st);
    st.stop_after = 1;
    CHECK(specdec_stream(session, NULL, prompt, N_PROMPT, &p, counting, &st, &stats) == SPECDEC_OK,
          "stream failed: %s", specdec_last_error());
    CHECK(st.pieces == 1, "%d pieces after the callback asked to stop", st.pieces);
    CHECK(stats.stop_reason == SPECDEC_STOP_CALLBACK, "stop_reason %d", (int)stats.stop_reason);
    CHECK(stats.new_tokens >= 1 && stats.new_tokens < (int64_t)n_greedy, "new_tokens %lld",
          (long long)stats.new_tokens);
    /* the stats of the pieces delivered: one target run and its draft runs (plus the two encoder runs) */
    CHECK(stats.target_calls == 1 && stats.ort_runs == 2 + stats.draft_calls + stats.target_calls,
          "target_calls %lld draft_calls %lld ort_runs %lld", (long long)stats.target_calls,
          (long long)stats.draft_calls, (long long)stats.ort_runs);
    CHECK(stats.target_s > 0 && stats.draft_s > 0
              && stats.total_s >= stats.encoder_s + stats.draft_s + stats.target_s,
          "times: total %g encoder %g draft %g target %g", stats.total_s, stats.encoder_s, stats.draft_s,
          stats.target_s);
    return healthy("a stream stopped by its callback");
}

static int case_stream_reentrant_call(void)
{
    stream_state st;
    specdec_params p = greedy_params();
    memset(&st, 0, sizeof st);
    CHECK(specdec_open(export_dir, "{\"provider\": \"cpu\"}", &st.other) == SPECDEC_OK, "open: %s",
          specdec_last_error());
    CHECK(specdec_stream(session, NULL, prompt, N_PROMPT, &p, reentrant, &st, NULL) == SPECDEC_OK,
          "stream failed: %s", specdec_last_error());
    specdec_close(st.other);
    CHECK(st.nested == SPECDEC_E_BUSY, "nested call on the same session: %s", specdec_status_name(st.nested));
    CHECK(strstr(st.nested_message, "specdec_generate_ids") && strstr(st.nested_message, "callback"),
          "BUSY message: %s", st.nested_message);
    CHECK(strstr(st.close_message, "specdec_close") && strstr(st.close_message, "stays open"),
          "close inside the callback: %s", st.close_message);
    CHECK(st.nested_other == SPECDEC_OK, "a call on another session inside the callback failed");
    return healthy("calls from inside a stream callback");   /* the refused close left it open */
}

/* ---- close, last error, constants ------------------------------------------------------------------------ */

static int case_close_null_twice(void)
{
    specdec_close(NULL);
    specdec_close(NULL);
    CHECK(specdec_last_error()[0] == '\0', "close(NULL) set an error");
    return healthy("close(NULL)");
}

static int case_closed_session_detected(void)
{
    specdec_session *s = NULL;
    int32_t out[MAX_NEW];
    size_t len;
    CHECK(specdec_open(export_dir, NULL, &s) == SPECDEC_OK && s != NULL, "open: %s", specdec_last_error());
    specdec_close(s);
    CHECK(specdec_last_error()[0] == '\0', "close set an error: %s", specdec_last_error());
    /* undefined behaviour by contract; this implementation detects it */
    CALL(expect_failure("after close", specdec_generate_ids(s, prompt, N_PROMPT, NULL, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "not open"));
    return healthy("use of a closed session");
}

static void *fail_on_thread(void *arg)
{
    int32_t out[4];
    size_t len;
    char *copy = (char *)arg;
    specdec_generate_ids(session, NULL, 3, NULL, out, 4, &len, NULL);
    snprintf(copy, SPECDEC_ERROR_MAX, "%s", specdec_last_error());
    return NULL;
}

static int case_last_error_is_thread_local(void)
{
    pthread_t t;
    char other[SPECDEC_ERROR_MAX] = "";
    const char *mine;
    specdec_close(NULL);                                     /* clears this thread's error */
    CALL(expect_failure("main", specdec_open(export_dir, NULL, NULL), SPECDEC_E_INVALID_ARGUMENT,
                        "specdec_open", "out_session"));
    mine = specdec_last_error();
    CHECK(pthread_create(&t, NULL, fail_on_thread, other) == 0, "pthread_create");
    pthread_join(t, NULL);
    CHECK(strstr(other, "specdec_generate_ids") && strstr(other, "input_ids is NULL"), "other thread: %s", other);
    CHECK(strstr(mine, "specdec_open") && strstr(specdec_last_error(), "out_session"),
          "this thread's message changed: %s", specdec_last_error());
    CHECK(specdec_version() && specdec_status_name(SPECDEC_OK) && specdec_last_error()[0] != '\0',
          "version/status_name cleared the error");
    return healthy("errors on two threads");
}

static int case_status_names(void)
{
    static const struct { specdec_status s; const char *name; } all[] = {
        {SPECDEC_OK, "SPECDEC_OK"}, {SPECDEC_E_INVALID_ARGUMENT, "SPECDEC_E_INVALID_ARGUMENT"},
        {SPECDEC_E_BUFFER_TOO_SMALL, "SPECDEC_E_BUFFER_TOO_SMALL"}, {SPECDEC_E_EXPORT, "SPECDEC_E_EXPORT"},
        {SPECDEC_E_PROVIDER, "SPECDEC_E_PROVIDER"}, {SPECDEC_E_BUSY, "SPECDEC_E_BUSY"},
        {SPECDEC_E_PYTHON, "SPECDEC_E_PYTHON"}, {SPECDEC_E_RUNTIME, "SPECDEC_E_RUNTIME"},
        {SPECDEC_E_INTERNAL, "SPECDEC_E_INTERNAL"},
    };
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; i++)
        CHECK(!strcmp(specdec_status_name(all[i].s), all[i].name), "%s", all[i].name);
    CHECK(!strcmp(specdec_status_name((specdec_status)1234), "SPECDEC_UNKNOWN_STATUS"), "unknown status");
    /* the stop reasons by the names the Python API gives them */
    CHECK(!strcmp(specdec_stop_reason_name(SPECDEC_STOP_NONE), "none") &&
          !strcmp(specdec_stop_reason_name(SPECDEC_STOP_EOS), "eos") &&
          !strcmp(specdec_stop_reason_name(SPECDEC_STOP_MAX_NEW_TOKENS), "max_new_tokens") &&
          !strcmp(specdec_stop_reason_name(SPECDEC_STOP_MAX_LENGTH), "max_length") &&
          !strcmp(specdec_stop_reason_name(SPECDEC_STOP_CALLBACK), "callback") &&
          !strcmp(specdec_stop_reason_name((specdec_stop_reason)99), "unknown"), "stop reason names");
    return 1;
}

/* ---- versioned structs (struct_size) ------------------------------------------------------------------- */

/* The structs as a host compiled against an older header sees them: struct_size and the API version 2 fields
   (no draft, no per-source counters). */
typedef struct {
    size_t struct_size;
    int32_t max_new_tokens;
    int32_t gamma;
    double temperature;
    int32_t top_k;
    double top_p;
    double lenience;
    uint64_t seed;
} params_v2;

typedef struct {
    size_t struct_size;
    int64_t target_calls, draft_calls, proposed, accepted, new_tokens, ort_runs;
    double acceptance_rate, tokens_per_target_call, encoder_s, draft_s, target_s, host_s, total_s;
    specdec_stop_reason stop_reason;
} stats_v2;

static int all_bytes(const void *p, size_t n, unsigned char value)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++)
        if (b[i] != value)
            return 0;
    return 1;
}

static int stream_calls;

static int count_calls(const int32_t *ids, size_t n, const char *text, size_t text_len, void *user)
{
    (void)ids; (void)n; (void)text; (void)text_len; (void)user;
    stream_calls++;
    return 0;
}

static int case_params_struct_size_invalid(void)
{
    static const size_t sizes[] = {0, 8, SPECDEC_PARAMS_SIZE_MIN - 1, SPECDEC_STRUCT_SIZE_MAX + 1, (size_t)-1};
    static const char *needles[] = {"params->struct_size is 0 (not set)", "smaller than the smallest specdec_params",
                                    "smaller than the smallest specdec_params", "larger than any specdec_params",
                                    "larger than any specdec_params"};
    const char *fix = "start from specdec_params_default()";
    int32_t out[MAX_NEW];
    char text[256];
    size_t len, i;
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        specdec_params p = greedy_params();
        specdec_stats stats = specdec_stats_empty();
        stats.new_tokens = 77;                              /* a failure zeroes valid stats */
        p.struct_size = sizes[i];
        CALL(expect_failure(needles[i], specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW, &len,
                                                             &stats),
                            SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", needles[i]));
        CHECK(strstr(specdec_last_error(), fix), "message lacks the fix: %s", specdec_last_error());
        CALL(expect_failure(needles[i], specdec_generate_text(session, "w5", &p, text, sizeof text, &len, &stats),
                            SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", needles[i]));
        stream_calls = 0;
        CALL(expect_failure(needles[i], specdec_stream(session, NULL, prompt, N_PROMPT, &p, count_calls, NULL,
                                                       &stats),
                            SPECDEC_E_INVALID_ARGUMENT, "specdec_stream", needles[i]));
        CHECK(stream_calls == 0, "the callback ran for a refused params struct");
        CHECK(stats.struct_size == sizeof stats && stats.new_tokens == 0
                  && stats.stop_reason == SPECDEC_STOP_NONE, "out_stats not zeroed when params were refused");
    }
    /* specdec_params_init checks its size too, and leaves the struct alone when it refuses */
    {
        specdec_params p = greedy_params();
        CALL(expect_failure("init NULL", specdec_params_init(NULL, sizeof p), SPECDEC_E_INVALID_ARGUMENT,
                            "specdec_params_init", "params is NULL"));
        CALL(expect_failure("init 0", specdec_params_init(&p, 0), SPECDEC_E_INVALID_ARGUMENT, "specdec_params_init",
                            "struct_size is 0"));
        CHECK(strstr(specdec_last_error(), "pass sizeof(specdec_params)"), "init fix: %s", specdec_last_error());
        CALL(expect_failure("init small", specdec_params_init(&p, 4), SPECDEC_E_INVALID_ARGUMENT,
                             "specdec_params_init", "smaller than"));
        CHECK(p.struct_size == sizeof p && p.gamma == 3, "a refused specdec_params_init wrote the struct");
        CHECK(specdec_params_init(&p, sizeof p) == SPECDEC_OK && p.gamma == SPECDEC_GAMMA_AUTO && p.draft == NULL,
              "specdec_params_init: %s", specdec_last_error());
        CHECK(strstr(specdec_last_error(), "smaller than"), "a successful specdec_params_init cleared the error");
    }
    return healthy("invalid params struct_size");
}

static int case_stats_struct_size_invalid(void)
{
    static const size_t sizes[] = {0, 8, SPECDEC_STATS_SIZE_MIN - 1, SPECDEC_STRUCT_SIZE_MAX + 1};
    static const char *needles[] = {"out_stats->struct_size is 0 (not set)", "smaller than the smallest specdec_stats",
                                    "smaller than the smallest specdec_stats", "larger than any specdec_stats"};
    int32_t out[MAX_NEW];
    size_t len, i;
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        specdec_params p = greedy_params();
        specdec_stats stats;
        memset(&stats, 0x5A, sizeof stats);
        stats.struct_size = sizes[i];
        CALL(expect_failure(needles[i], specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW, &len,
                                                             &stats),
                            SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", needles[i]));
        CHECK(strstr(specdec_last_error(), "start from specdec_stats_empty()"), "message lacks the fix: %s",
              specdec_last_error());
        stream_calls = 0;
        CALL(expect_failure(needles[i], specdec_stream(session, "w5", NULL, 0, &p, count_calls, NULL, &stats),
                            SPECDEC_E_INVALID_ARGUMENT, "specdec_stream", needles[i]));
        CHECK(stream_calls == 0, "the callback ran for a refused stats struct");
        CHECK(stats.struct_size == sizes[i] && all_bytes((char *)&stats + sizeof stats.struct_size,
                                                         sizeof stats - sizeof stats.struct_size, 0x5A),
              "a refused out_stats was written");
    }
    return healthy("invalid stats struct_size");
}

static int case_older_params_layout(void)
{
    /* the older struct, followed by what would be `draft` in this header's layout: a name the library would
       refuse, so a call that read past struct_size would fail */
    struct { params_v2 p; const char *beyond; } old;
    int32_t out[MAX_NEW];
    size_t len = 0;
    specdec_stats stats = specdec_stats_empty();
    CHECK(sizeof old.p == SPECDEC_PARAMS_SIZE_MIN && offsetof(specdec_params, draft) == sizeof old.p,
          "params_v2 is %zu bytes, SPECDEC_PARAMS_SIZE_MIN %zu", sizeof old.p, (size_t)SPECDEC_PARAMS_SIZE_MIN);
    old.beyond = "bogus";
    CHECK(specdec_params_init((specdec_params *)&old.p, sizeof old.p) == SPECDEC_OK, "init of the older layout: %s",
          specdec_last_error());
    CHECK(old.p.struct_size == sizeof old.p && old.p.max_new_tokens == 64 && old.p.gamma == SPECDEC_GAMMA_AUTO,
          "init of the older layout gave other defaults");
    CHECK(old.beyond != NULL && !strcmp(old.beyond, "bogus"), "specdec_params_init wrote past struct_size");
    old.p.max_new_tokens = MAX_NEW;
    old.p.gamma = 3;
    CHECK(specdec_generate_ids(session, prompt, N_PROMPT, (const specdec_params *)&old, out, MAX_NEW, &len, &stats)
              == SPECDEC_OK, "generate with the older layout: %s", specdec_last_error());
    /* draft is missing, so it is "auto": greedy output is the target's, whatever the source */
    CHECK(len == n_greedy && !memcmp(out, ref_greedy, len * sizeof *out), "older layout: greedy output changed");
    CHECK(stats.target_only_rounds + stats.lookup_rounds + stats.model_rounds == stats.target_calls,
          "older layout: source rounds do not add up");
    old.p.gamma = SPECDEC_GAMMA_AUTO;
    CHECK(specdec_generate_ids(session, prompt, N_PROMPT, (const specdec_params *)&old, out, MAX_NEW, &len, NULL)
              == SPECDEC_OK && len == n_greedy && !memcmp(out, ref_greedy, len * sizeof *out),
          "older layout with gamma auto: %s", specdec_last_error());
    old.p.gamma = 99;                       /* the fields it has are still checked */
    CALL(expect_failure("older layout gamma", specdec_generate_ids(session, prompt, N_PROMPT,
                                                                   (const specdec_params *)&old, out, MAX_NEW, &len,
                                                                   NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "gamma"));
    return healthy("an older params layout");
}

static int case_older_stats_layout(void)
{
    struct { stats_v2 s; unsigned char beyond[sizeof(specdec_stats)]; } old;
    int32_t out[MAX_NEW];
    size_t len = 0;
    specdec_params p = greedy_params();
    CHECK(sizeof old.s == SPECDEC_STATS_SIZE_MIN, "stats_v2 is %zu bytes, SPECDEC_STATS_SIZE_MIN %zu", sizeof old.s,
          (size_t)SPECDEC_STATS_SIZE_MIN);
    memset(&old, 0xAB, sizeof old);
    old.s.struct_size = sizeof old.s;
    CHECK(specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW, &len, (specdec_stats *)&old)
              == SPECDEC_OK, "generate with the older stats layout: %s", specdec_last_error());
    CHECK(old.s.new_tokens == (int64_t)n_greedy && old.s.target_calls >= 1 && old.s.total_s > 0
              && old.s.stop_reason == SPECDEC_STOP_MAX_NEW_TOKENS,
          "older stats layout not filled: new_tokens %lld stop %d", (long long)old.s.new_tokens,
          (int)old.s.stop_reason);
    CHECK(all_bytes(old.beyond, sizeof old.beyond, 0xAB), "the library wrote past the older stats' struct_size");
    p.gamma = 99;                           /* a failure zeroes what the struct has, and nothing past it */
    CALL(expect_failure("older stats, failure", specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW,
                                                                     &len, (specdec_stats *)&old),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "gamma"));
    CHECK(old.s.struct_size == sizeof old.s && old.s.new_tokens == 0 && old.s.stop_reason == SPECDEC_STOP_NONE,
          "older stats not zeroed on a failure");
    CHECK(all_bytes(old.beyond, sizeof old.beyond, 0xAB), "the library wrote past the older stats on a failure");
    return healthy("an older stats layout");
}

static int case_newer_layouts(void)
{
    /* a host compiled against a later header: larger structs whose trailing fields this library does not know */
    struct { specdec_params p; int64_t future; const char *future_name; } next;
    struct { specdec_stats s; unsigned char future[64]; } next_stats;
    int32_t out[MAX_NEW];
    size_t len = 0;
    memset(&next, 0x33, sizeof next);
    CHECK(specdec_params_init(&next.p, sizeof next) == SPECDEC_OK, "init of a newer layout: %s",
          specdec_last_error());
    CHECK(next.p.struct_size == sizeof next && next.future == 0 && next.future_name == NULL
              && next.p.gamma == SPECDEC_GAMMA_AUTO,
          "init of a newer layout: unknown fields not zeroed");
    next.p.max_new_tokens = MAX_NEW;
    next.p.gamma = 3;
    next.p.draft = "draft";
    next.future = 12345;                    /* ignored by this library */
    next.future_name = "bogus";
    memset(&next_stats, 0xCD, sizeof next_stats);
    next_stats.s.struct_size = sizeof next_stats;
    CHECK(specdec_generate_ids(session, prompt, N_PROMPT, &next.p, out, MAX_NEW, &len, &next_stats.s) == SPECDEC_OK,
          "generate with newer layouts: %s", specdec_last_error());
    CHECK(len == n_greedy && !memcmp(out, ref_greedy, len * sizeof *out), "newer layout: greedy output changed");
    CHECK(next_stats.s.new_tokens == (int64_t)n_greedy && next_stats.s.model_rounds == next_stats.s.target_calls,
          "newer stats layout not filled");
    CHECK(all_bytes(next_stats.future, sizeof next_stats.future, 0xCD),
          "the library wrote stats fields it does not know");
    return healthy("newer layouts");
}

/* ---- draft sources --------------------------------------------------------------------------------------- */

/* `draft` is refused by every generation function with a message containing `needle` (and naming the choices when
   `choices`); the session is fine afterwards */
static int refused_draft(const char *draft, const char *needle, int choices)
{
    int32_t out[MAX_NEW];
    char text[256], what[128];
    size_t len;
    specdec_params p = greedy_params();
    p.draft = draft;
    snprintf(what, sizeof what, "draft \"%s\"", draft);
    CALL(expect_failure(what, specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", needle));
    CHECK(!choices || (strstr(specdec_last_error(), "none, auto, lookup, draft, lookup,draft")),
          "%s: the message does not name the choices: %s", what, specdec_last_error());
    CALL(expect_failure(what, specdec_generate_text(session, "w5", &p, text, sizeof text, &len, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_text", needle));
    stream_calls = 0;
    CALL(expect_failure(what, specdec_stream(session, NULL, prompt, N_PROMPT, &p, count_calls, NULL, NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_stream", needle));
    CHECK(stream_calls == 0, "%s: the callback ran", what);
    return healthy(what);
}

static int case_unknown_draft(void)
{
    specdec_params p = greedy_params();
    int32_t out[MAX_NEW];
    size_t len;
    CALL(refused_draft("bogus", "unknown draft 'bogus'", 1));
    CALL(refused_draft("lookup,bogus", "unknown draft 'bogus'", 1));
    CALL(refused_draft("none,draft", "cannot be chain levels", 1));
    CALL(refused_draft("draft,lookup", "first level", 0));
    p.draft = "dr\xff";
    CALL(expect_failure("draft not UTF-8", specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW, &len,
                                                                NULL),
                        SPECDEC_E_INVALID_ARGUMENT, "specdec_generate_ids", "params.draft is not valid UTF-8"));
    return healthy("unknown drafts");
}

static int case_empty_draft_chain(void)
{
    CALL(refused_draft("", "empty", 1));
    CALL(refused_draft(" ", "empty", 1));
    CALL(refused_draft("lookup,", "empty", 1));
    CALL(refused_draft("+draft", "empty", 1));
    return 1;
}

static int case_draft_sources_greedy_exact(void)
{
    /* greedy output (lenience 1) is the target's whatever the source and gamma: every draft name, fixed and auto
       gamma, gives the target-only (gamma 0) tokens; and the per-source counters say where the guesses came from */
    static const char *drafts[] = {"none", "lookup", "draft", "lookup,draft", "lookup+draft", NULL};
    static const int32_t gammas[] = {3, SPECDEC_GAMMA_AUTO};
    int32_t ref[MAX_NEW], out[MAX_NEW];
    size_t n_ref = 0, len = 0, i, g;
    specdec_params p = greedy_params();
    p.gamma = 0;
    CHECK(specdec_generate_ids(session, prompt, N_PROMPT, &p, ref, MAX_NEW, &n_ref, NULL) == SPECDEC_OK,
          "gamma 0: %s", specdec_last_error());
    CHECK(n_ref == n_greedy && !memcmp(ref, ref_greedy, n_ref * sizeof *ref), "gamma 0 differs from gamma 3");
    for (i = 0; i < sizeof drafts / sizeof drafts[0]; i++) {
        for (g = 0; g < 2; g++) {
            const char *name = drafts[i] ? drafts[i] : "NULL (auto)";
            specdec_stats s = specdec_stats_empty();
            p = greedy_params();
            p.draft = drafts[i];
            p.gamma = gammas[g];
            CHECK(specdec_generate_ids(session, prompt, N_PROMPT, &p, out, MAX_NEW, &len, &s) == SPECDEC_OK,
                  "draft %s gamma %d: %s", name, (int)p.gamma, specdec_last_error());
            CHECK(len == n_ref && !memcmp(out, ref, len * sizeof *out), "draft %s gamma %d: other greedy tokens than "
                  "gamma 0", name, (int)p.gamma);
            CHECK(s.target_only_rounds + s.lookup_rounds + s.model_rounds == s.target_calls
                      && s.lookup_proposed + s.model_proposed == s.proposed
                      && s.lookup_accepted + s.model_accepted == s.accepted,
                  "draft %s gamma %d: per-source counters do not add up", name, (int)p.gamma);
            if (drafts[i] && !strcmp(drafts[i], "none"))
                CHECK(s.target_only_rounds == s.target_calls && s.proposed == 0 && s.draft_calls == 0,
                      "draft none: guesses were made");
            if (drafts[i] && !strcmp(drafts[i], "lookup"))
                CHECK(s.model_rounds == 0 && s.draft_calls == 0 && s.chain_proposed == 0
                          && s.lookup_proposed == s.proposed,
                      "draft lookup: a model made guesses");
            if (drafts[i] && !strcmp(drafts[i], "draft"))
                CHECK(s.lookup_rounds == 0 && s.chain_proposed == 0, "draft draft: the lookup made guesses");
            if (drafts[i] && (strchr(drafts[i], ',') || strchr(drafts[i], '+')))   /* the chain, either spelling */
                CHECK(s.lookup_rounds == 0 && s.lookup_proposed == 0, "draft %s: the target verified the lookup",
                      name);
            if (drafts[i] && gammas[g] == 3 && strcmp(drafts[i], "lookup+draft"))
                printf("sources %s: target_calls=%lld proposed=%lld accepted=%lld target_only_rounds=%lld "
                       "lookup_rounds=%lld lookup_proposed=%lld lookup_accepted=%lld model_rounds=%lld "
                       "model_proposed=%lld model_accepted=%lld chain_proposed=%lld chain_accepted=%lld\n",
                       drafts[i], (long long)s.target_calls, (long long)s.proposed, (long long)s.accepted,
                       (long long)s.target_only_rounds, (long long)s.lookup_rounds, (long long)s.lookup_proposed,
                       (long long)s.lookup_accepted, (long long)s.model_rounds, (long long)s.model_proposed,
                       (long long)s.model_accepted, (long long)s.chain_proposed, (long long)s.chain_accepted);
        }
    }
    /* a NULL params pointer is the defaults: 64 tokens, draft auto, gamma auto (greedy: the same first tokens) */
    {
        int32_t longer[64];
        CHECK(specdec_generate_ids(session, prompt, N_PROMPT, NULL, longer, 64, &len, NULL) == SPECDEC_OK
                  && len >= n_ref && !memcmp(longer, ref, n_ref * sizeof *ref),
              "NULL params: %s", specdec_last_error());
    }
    return healthy("draft sources");
}

typedef struct { const char *name; int (*run)(void); } test_case;

int main(int argc, char **argv)
{
    static const test_case cases[] = {
        {"open_null_out_session", case_open_null_out_session},
        {"open_null_export_dir", case_open_null_export_dir},
        {"open_missing_export", case_open_missing_export},
        {"open_corrupt_manifest", case_open_corrupt_manifest},
        {"open_tampered_file", case_open_tampered_file},
        {"open_bad_options", case_open_bad_options},
        {"open_bad_provider", case_open_bad_provider},
        {"open_draft_option", case_open_draft_option},
        {"open_datastore_option", case_open_datastore_option},
        {"open_graph_capture_option", case_open_graph_capture_option},
        {"long_message_truncated", case_long_message_truncated},
        {"open_unreadable_path", case_open_unreadable_path},
        {"null_session", case_null_session},
        {"null_input_ids", case_null_input_ids},
        {"bad_token_ids", case_bad_token_ids},
        {"null_outputs", case_null_outputs},
        {"buffer_too_small_ids", case_buffer_too_small_ids},
        {"buffer_too_small_text", case_buffer_too_small_text},
        {"invalid_gamma", case_invalid_gamma},
        {"invalid_max_new_tokens", case_invalid_max_new_tokens},
        {"invalid_temperature", case_invalid_temperature},
        {"invalid_top_k", case_invalid_top_k},
        {"invalid_top_p", case_invalid_top_p},
        {"invalid_lenience", case_invalid_lenience},
        {"bad_prompt", case_bad_prompt},
        {"stream_bad_arguments", case_stream_bad_arguments},
        {"stream_stopped_by_callback", case_stream_stopped_by_callback},
        {"stream_reentrant_call", case_stream_reentrant_call},
        {"close_null_twice", case_close_null_twice},
        {"closed_session_detected", case_closed_session_detected},
        {"last_error_is_thread_local", case_last_error_is_thread_local},
        {"status_names", case_status_names},
        {"params_struct_size_invalid", case_params_struct_size_invalid},
        {"stats_struct_size_invalid", case_stats_struct_size_invalid},
        {"older_params_layout", case_older_params_layout},
        {"older_stats_layout", case_older_stats_layout},
        {"newer_layouts", case_newer_layouts},
        {"unknown_draft", case_unknown_draft},
        {"empty_draft_chain", case_empty_draft_chain},
        {"draft_sources_greedy_exact", case_draft_sources_greedy_exact},
    };
    size_t i;
    specdec_params p;
    specdec_session_info info;
    specdec_status st;

    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s EXPORT_DIR MISSING_DIR CORRUPT_DIR TAMPERED_DIR [CAPTURE_DIR]\n", argv[0]);
        return 2;
    }
    export_dir = argv[1], missing_dir = argv[2], corrupt_dir = argv[3], tampered_dir = argv[4];
    capture_dir = argc == 6 ? argv[5] : NULL;

    p = specdec_params_default();
    printf("version: %s\n", specdec_version());
    printf("defaults: struct_size=%zu max_new_tokens=%d gamma=%d temperature=%g top_k=%d top_p=%g lenience=%g "
           "seed=%llu draft=%s num_beams=%d length_penalty=%g early_stopping=%d num_return_sequences=%d "
           "min_new_tokens=%d no_repeat_ngram_size=%d candidates=%lld\n", p.struct_size, (int)p.max_new_tokens,
           (int)p.gamma,
           p.temperature, (int)p.top_k, p.top_p, p.lenience, (unsigned long long)p.seed, p.draft ? p.draft : "NULL",
           (int)p.num_beams, p.length_penalty, (int)p.early_stopping, (int)p.num_return_sequences,
           (int)p.min_new_tokens, (int)p.no_repeat_ngram_size, (long long)p.candidates);
    printf("sizes: params=%zu params_min=%zu stats=%zu stats_min=%zu gamma_auto=%d api=%d\n",
           sizeof(specdec_params), (size_t)SPECDEC_PARAMS_SIZE_MIN, sizeof(specdec_stats),
           (size_t)SPECDEC_STATS_SIZE_MIN, SPECDEC_GAMMA_AUTO, SPECDEC_API_VERSION);

    st = specdec_open(export_dir, "{\"provider\": \"cpu\", \"threads\": 1}", &session);
    if (st != SPECDEC_OK) {
        printf("not ok setup: open %s: %s\n", specdec_status_name(st), specdec_last_error());
        return 1;
    }
    if (specdec_get_info(session, &info) != SPECDEC_OK) {
        printf("not ok setup: info: %s\n", specdec_last_error());
        return 1;
    }
    printf("info: gamma_max=%d max_length=%d vocab_size=%d eos_token_id=%d provider=%s\n", (int)info.gamma_max,
           (int)info.max_length, (int)info.vocab_size, (int)info.eos_token_id, info.provider);
    p = greedy_params();
    st = specdec_generate_ids(session, prompt, N_PROMPT, &p, ref_greedy, MAX_NEW, &n_greedy, NULL);
    p = sampled_params();
    if (st == SPECDEC_OK)
        st = specdec_generate_ids(session, prompt, N_PROMPT, &p, ref_sampled, MAX_NEW, &n_sampled, NULL);
    p = greedy_params();
    if (st == SPECDEC_OK) {
        size_t len;
        st = specdec_generate_text(session, PROMPT_TEXT, &p, ref_text, sizeof ref_text, &len, NULL);
    }
    if (st != SPECDEC_OK) {
        printf("not ok setup: reference generation: %s\n", specdec_last_error());
        return 1;
    }
    printf("reference greedy:");
    for (i = 0; i < n_greedy; i++)
        printf(" %d", (int)ref_greedy[i]);
    printf("\nreference sampled:");
    for (i = 0; i < n_sampled; i++)
        printf(" %d", (int)ref_sampled[i]);
    printf("\nreference text: %s\n", ref_text);
    fflush(stdout);

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        detail[0] = '\0';
        if (cases[i].run())
            printf("ok %s\n", cases[i].name);
        else
            printf("not ok %s: %s\n", cases[i].name, detail);
        fflush(stdout);
    }
    specdec_close(session);
    specdec_close(NULL);
    return 0;
}
