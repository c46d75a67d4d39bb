/* Whisper exports through the C API (API versions 6 and 7): specdec_transcribe, specdec_transcribe_ids,
 * specdec_transcribe_segments and specdec_get_audio_info, driven by tests/bindings/test_capi_whisper.py.
 *
 *   capi_whisper WHISPER_EXPORT T5_EXPORT AUDIO.f32 AUDIO.wav BAD.wav STAMPED_EXPORT CUT.f32 LONG.f32 LONG.wav
 *   capi_whisper --fuzz WHISPER_EXPORT AUDIO.f32 WAV...
 *
 * AUDIO.f32 holds raw little-endian float32 samples; AUDIO.wav is the same audio as 16-bit PCM, and AUDIO.f32 is
 * exactly what reading it gives. BAD.wav is a WAV file the library must refuse (another sample rate).
 * STAMPED_EXPORT is a Whisper export with timestamp tokens (WHISPER_EXPORT has none); CUT.f32 is audio within its
 * window whose last segment the audio's end cuts (no closing timestamp); LONG.f32 is audio longer than two windows
 * and LONG.wav the same as 16-bit PCM (LONG.f32 is what reading it gives).
 *
 * The first form prints "api: N", "audio_info ...: ..." and "reference NAME: ids=...|text=...|stats ..." lines,
 * "segments NAME: count=N|stats ..." lines each followed by its "segment NAME I: start=S|end=E|text=T" lines (E
 * "nan" for a segment the audio's end cut), which the test compares with the Python API, then "ok NAME" or "not ok
 * NAME: detail" per case: bad arguments each return a status and a one-line message, never crash, and leave the
 * sessions giving their reference outputs. CAPI_WHISPER_VERBOSE=1 also prints every refusal.
 *
 * The second form transcribes each WAV file (fuzzed ones) from its path, printing "case I ok TEXT" or "case I
 * refused STATUS MESSAGE", then "case I good same" or "case I good differs ..." once the session has transcribed
 * AUDIO.f32 again. A crash shows as a signal to the caller.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec.h"

#define MAX_NEW 16      /* max_new_tokens of the cases */
#define MAX_IDS 64      /* output buffers: room for the defaults (max_new_tokens 64) */
#define LONG_IDS 1024   /* room for the long audio's windows */
#define MAX_SEGMENTS 64
#define OPTIONS "{\"provider\": \"cpu\", \"threads\": 1}"

static specdec_session *session, *stamped;      /* the Whisper pair without and with timestamp tokens */
static float *audio, *cut_audio, *long_audio;
static size_t n_audio, n_cut, n_long, window;
static const char *wav_path, *bad_wav_path, *t5_dir, *long_wav_path;
static int32_t ref_greedy[MAX_IDS], ref_sampled[MAX_IDS];
static size_t n_greedy, n_sampled;
static char ref_text[4096];

/* a transcript's segments as specdec_transcribe_segments gives them */
struct segments {
    size_t count, len;
    double starts[MAX_SEGMENTS], ends[MAX_SEGMENTS];
    size_t lengths[MAX_SEGMENTS];
    char text[8192];
};
static struct segments ref_segments;             /* the stamped session's greedy segments of AUDIO.f32 */
static int have_ref_segments;

#include "capi_cases.h"          /* greedy_params: the draft model with a fixed gamma, reproducible sampling too */

static specdec_params sampled_params(void)
{
    specdec_params p = greedy_params();
    p.gamma = 2;
    p.temperature = 1.0;
    p.seed = 5;
    return p;
}

static float *read_samples(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    long size;
    float *out;
    if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET))
        return NULL;
    out = malloc((size_t)size);
    *n = out ? fread(out, sizeof *out, (size_t)size / sizeof *out, f) : 0;
    fclose(f);
    return out;
}

/* refused as a bad argument, in one line that starts "function:", holds `needle` and names a fix */
static int expect_failure(const char *what, specdec_status got, const char *function, const char *needle)
{
    const char *msg = specdec_last_error();
    CALL(one_line_refusal(what, got, SPECDEC_E_INVALID_ARGUMENT, function, needle, "CAPI_WHISPER_VERBOSE"));
    CHECK(msg[strlen(function)] == ':', "%s: message does not start with %s: %s", what, function, msg);
    CHECK(strstr(msg, "; ") != NULL && msg[strlen(msg) - 1] == '.', "%s: message names no fix: %s", what, msg);
    return 1;
}

/* specdec_transcribe and specdec_transcribe_ids with the same arguments must both fail, naming `needle`; so must
   specdec_transcribe_segments, on the session with timestamp tokens in place of the shared one (which has none) */
static int both_refuse(const char *what, specdec_session *s, const float *pcm, size_t n, const char *wav,
                       const char *language, const char *task, const specdec_params *p, const char *needle)
{
    char text[256] = "untouched";
    int32_t ids[MAX_IDS] = {-7};
    double starts[4] = {-7.0}, ends[4] = {-7.0};
    size_t len = 12345, lengths[4] = {777}, count = 12345;
    specdec_stats stats = specdec_stats_empty();
    stats.new_tokens = 99;
    CALL(expect_failure(what, specdec_transcribe(s, pcm, n, wav, language, task, p, text, sizeof text, &len, &stats),
                        "specdec_transcribe", needle));
    CHECK(!strcmp(text, "untouched") && stats.new_tokens == 0 && stats.stop_reason == SPECDEC_STOP_NONE,
          "%s: output written or stats not zeroed on failure", what);
    CALL(expect_failure(what, specdec_transcribe_ids(s, pcm, n, wav, language, task, p, ids, MAX_IDS, &len, NULL),
                        "specdec_transcribe_ids", needle));
    CHECK(ids[0] == -7, "%s: ids written on failure", what);
    stats = specdec_stats_empty();
    stats.new_tokens = 99;
    CALL(expect_failure(what, specdec_transcribe_segments(s == session ? stamped : s, pcm, n, wav, language, task, p,
                                                          text, sizeof text, &len, starts, ends, lengths, 4, &count,
                                                          &stats), "specdec_transcribe_segments", needle));
    CHECK(!strcmp(text, "untouched") && starts[0] == -7.0 && ends[0] == -7.0 && lengths[0] == 777 &&
          stats.new_tokens == 0 && stats.stop_reason == SPECDEC_STOP_NONE,
          "%s: segments written or stats not zeroed on failure", what);
    return 1;
}

/* specdec_transcribe_segments into `out` (its text layout checked: each segment's text followed by a NUL) */
static specdec_status get_segments(specdec_session *s, const float *pcm, size_t n, const char *wav,
                                   const specdec_params *p, struct segments *out, specdec_stats *stats)
{
    size_t i, at = 0;
    specdec_status st = specdec_transcribe_segments(s, pcm, n, wav, "en", NULL, p, out->text, sizeof out->text,
                                                    &out->len, out->starts, out->ends, out->lengths, MAX_SEGMENTS,
                                                    &out->count, stats);
    if (st != SPECDEC_OK)
        return st;
    for (i = 0; i < out->count; i++) {
        if (strlen(out->text + at) != out->lengths[i]) {
            snprintf(detail, sizeof detail, "segment %zu: its text is not %zu bytes and a NUL", i, out->lengths[i]);
            return SPECDEC_E_INTERNAL;
        }
        at += out->lengths[i] + 1;
    }
    if (at != (out->count ? out->len + 1 : 0) || (out->count == 0 && (out->len != 0 || out->text[0] != '\0'))) {
        snprintf(detail, sizeof detail, "the segments' texts take %zu bytes, but *out_len is %zu", at, out->len);
        return SPECDEC_E_INTERNAL;
    }
    return SPECDEC_OK;
}

static int same_segments(const struct segments *a, const struct segments *b)
{
    size_t i;
    if (a->count != b->count || a->len != b->len || memcmp(a->text, b->text, a->len + 1))
        return 0;
    for (i = 0; i < a->count; i++)      /* NaN ends compare equal here: both are NaN */
        if (a->starts[i] != b->starts[i] || a->lengths[i] != b->lengths[i] ||
            (a->ends[i] != b->ends[i] && !(isnan(a->ends[i]) && isnan(b->ends[i]))))
            return 0;
    return 1;
}

/* the shared session still gives the reference outputs, and a success clears the last error */
static int healthy(const char *after)
{
    int32_t out[MAX_IDS];
    char text[4096];
    size_t len = 0;
    specdec_params p = greedy_params();
    specdec_status st = specdec_transcribe_ids(session, audio, n_audio, NULL, "en", NULL, &p, out, MAX_IDS, &len,
                                               NULL);
    CHECK(st == SPECDEC_OK && len == n_greedy && !memcmp(out, ref_greedy, len * sizeof *out),
          "after %s: greedy output changed (%s %s)", after, specdec_status_name(st), specdec_last_error());
    CHECK(specdec_last_error()[0] == '\0', "after %s: last error not cleared by a success", after);
    p = sampled_params();
    st = specdec_transcribe_ids(session, audio, n_audio, NULL, "en", NULL, &p, out, MAX_IDS, &len, NULL);
    CHECK(st == SPECDEC_OK && len == n_sampled && !memcmp(out, ref_sampled, len * sizeof *out),
          "after %s: sampled output changed (%s)", after, specdec_status_name(st));
    p = greedy_params();
    st = specdec_transcribe(session, audio, n_audio, NULL, "en", NULL, &p, text, sizeof text, &len, NULL);
    CHECK(st == SPECDEC_OK && !strcmp(text, ref_text), "after %s: text output changed (%s)", after,
          specdec_status_name(st));
    if (have_ref_segments) {
        static struct segments again;
        p = greedy_params();
        st = get_segments(stamped, audio, n_audio, NULL, &p, &again, NULL);
        CHECK(st == SPECDEC_OK && same_segments(&again, &ref_segments), "after %s: the segments changed (%s %s)",
              after, specdec_status_name(st), specdec_last_error());
    }
    return 1;
}

static void print_reference(const char *name, const int32_t *ids, size_t n_ids, const char *text,
                            const specdec_stats *st)
{
    size_t i;
    printf("reference %s: ids=", name);
    for (i = 0; i < n_ids; i++)
        printf("%s%d", i ? " " : "", (int)ids[i]);
    printf("|text=%s|stats target_calls=%lld draft_calls=%lld ort_runs=%lld proposed=%lld accepted=%lld "
           "stop_reason=%d\n", text, (long long)st->target_calls, (long long)st->draft_calls,
           (long long)st->ort_runs, (long long)st->proposed, (long long)st->accepted, (int)st->stop_reason);
}

/* one reference line: the ids of specdec_transcribe_ids, the text of specdec_transcribe (which must be the text
   specdec_decode gives for those ids), the stats */
static int reference(const char *name, const char *language, const char *task, const specdec_params *p,
                     int32_t *ids, size_t *n_ids, char *text, size_t text_cap)
{
    specdec_stats st = specdec_stats_empty(), st_text = specdec_stats_empty();
    char decoded[4096];
    size_t len = 0, dlen = 0;
    CHECK(specdec_transcribe_ids(session, audio, n_audio, NULL, language, task, p, ids, MAX_IDS, n_ids, &st) ==
          SPECDEC_OK, "%s ids: %s", name, specdec_last_error());
    CHECK(specdec_transcribe(session, audio, n_audio, NULL, language, task, p, text, text_cap, &len, &st_text) ==
          SPECDEC_OK, "%s text: %s", name, specdec_last_error());
    CHECK(specdec_decode(session, ids, *n_ids, decoded, sizeof decoded, &dlen) == SPECDEC_OK &&
          !strcmp(decoded, text) && len == strlen(text), "%s: text is not the decoded ids", name);
    CHECK(st.new_tokens == (int64_t)*n_ids && st_text.new_tokens == st.new_tokens, "%s: new_tokens", name);
    print_reference(name, ids, *n_ids, text, &st);
    return 1;
}

/* a reference of audio longer than the window (LONG.f32, or LONG.wav when `wav`) on session `s`: its ids and text
   (the segments' texts joined, which need not be specdec_decode of the ids) */
static int long_reference(const char *name, specdec_session *s, const char *wav, const specdec_params *p,
                          size_t *n_ids)
{
    static int32_t ids[LONG_IDS];
    static char text[16384];
    specdec_stats st = specdec_stats_empty();
    size_t len = 0;
    const float *pcm = wav ? NULL : long_audio;
    size_t n = wav ? 0 : n_long;
    CHECK(specdec_transcribe_ids(s, pcm, n, wav, "en", NULL, p, ids, LONG_IDS, n_ids, &st) == SPECDEC_OK,
          "%s ids: %s", name, specdec_last_error());
    CHECK(specdec_transcribe(s, pcm, n, wav, "en", NULL, p, text, sizeof text, &len, NULL) == SPECDEC_OK &&
          len == strlen(text), "%s text: %s", name, specdec_last_error());
    CHECK(st.new_tokens >= (int64_t)*n_ids, "%s: fewer new_tokens than ids", name);
    print_reference(name, ids, *n_ids, text, &st);
    return 1;
}

/* "segments NAME: count=N|stats ..." and a "segment NAME I: start=S|end=E|text=T" line per segment; the segments
   in `out` */
static int print_segments(const char *name, specdec_session *s, const float *pcm, size_t n, const char *wav,
                          const specdec_params *p, struct segments *out)
{
    specdec_stats st = specdec_stats_empty();
    size_t i, at = 0;
    specdec_status status;
    detail[0] = '\0';
    status = get_segments(s, pcm, n, wav, p, out, &st);
    if (status != SPECDEC_OK && detail[0] != '\0')
        return 0;                               /* the layout check said why */
    CHECK(status == SPECDEC_OK, "segments %s: %s %s", name, specdec_status_name(status), specdec_last_error());
    printf("segments %s: count=%zu|stats target_calls=%lld draft_calls=%lld ort_runs=%lld proposed=%lld "
           "accepted=%lld new_tokens=%lld stop_reason=%d\n", name, out->count, (long long)st.target_calls,
           (long long)st.draft_calls, (long long)st.ort_runs, (long long)st.proposed, (long long)st.accepted,
           (long long)st.new_tokens, (int)st.stop_reason);
    for (i = 0; i < out->count; i++) {
        printf("segment %s %zu: start=%.17g|end=%.17g|text=%s\n", name, i, out->starts[i], out->ends[i],
               out->text + at);
        at += out->lengths[i] + 1;
    }
    return 1;
}

/* ---- cases ------------------------------------------------------------------------------------------------ */

static int case_references(void)
{
    int32_t ids[MAX_IDS];
    size_t n = 0;
    char text[4096];
    specdec_params p = greedy_params();
    CALL(reference("greedy", "en", NULL, &p, ref_greedy, &n_greedy, ref_text, sizeof ref_text));
    CHECK(n_greedy > 0 && ref_text[0] != '\0', "empty greedy output");
    p = sampled_params();
    CALL(reference("sampled", "en", NULL, &p, ref_sampled, &n_sampled, text, sizeof text));
    p = greedy_params();
    CALL(reference("detected", NULL, NULL, &p, ids, &n, text, sizeof text));
    CALL(reference("translate", "<|de|>", "translate", &p, ids, &n, text, sizeof text));
    p.draft = "none";
    CALL(reference("target_only", "en", "transcribe", &p, ids, &n, text, sizeof text));
    p.draft = "lookup,draft";
    CALL(reference("chain", "en", NULL, &p, ids, &n, text, sizeof text));
    p = greedy_params();
    p.num_beams = 3;
    CALL(reference("beams", "de", NULL, &p, ids, &n, text, sizeof text));
    CALL(reference("defaults", "en", NULL, NULL, ids, &n, text, sizeof text));
    return healthy("the references");
}

static int case_wav_equals_pcm(void)
{
    int32_t ids[MAX_IDS];
    char text[4096];
    size_t len = 0;
    specdec_params p = greedy_params();
    CHECK(specdec_transcribe_ids(session, NULL, 0, wav_path, "en", NULL, &p, ids, MAX_IDS, &len, NULL) ==
          SPECDEC_OK, "wav ids: %s", specdec_last_error());
    CHECK(len == n_greedy && !memcmp(ids, ref_greedy, len * sizeof *ids), "the WAV file's ids differ");
    CHECK(specdec_transcribe(session, NULL, 0, wav_path, "en", NULL, &p, text, sizeof text, &len, NULL) ==
          SPECDEC_OK && !strcmp(text, ref_text), "the WAV file's text differs: %s", specdec_last_error());
    return healthy("the WAV file");
}

static int case_audio_info(void)
{
    size_t max_samples = 1;
    int32_t rate = 1;
    specdec_session *t5 = NULL;
    CHECK(specdec_get_audio_info(session, &max_samples, &rate) == SPECDEC_OK, "%s", specdec_last_error());
    CHECK(specdec_get_audio_info(session, NULL, NULL) == SPECDEC_OK, "NULL outputs: %s", specdec_last_error());
    printf("audio_info whisper: max_samples=%zu sample_rate=%d\n", max_samples, (int)rate);
    window = max_samples;
    CHECK(specdec_open(t5_dir, OPTIONS, &t5) == SPECDEC_OK, "open T5: %s", specdec_last_error());
    CHECK(specdec_get_audio_info(t5, &max_samples, &rate) == SPECDEC_OK, "%s", specdec_last_error());
    printf("audio_info t5: max_samples=%zu sample_rate=%d\n", max_samples, (int)rate);
    specdec_close(t5);
    CALL(expect_failure("NULL session", specdec_get_audio_info(NULL, &max_samples, &rate), "specdec_get_audio_info",
                        "session is NULL"));
    return 1;
}

static int case_measure_only(void)
{
    char text[4096];
    int32_t ids[MAX_IDS];
    size_t len = 0;
    specdec_params p = greedy_params();
    specdec_status st = specdec_transcribe(session, audio, n_audio, NULL, "en", NULL, &p, NULL, 0, &len, NULL);
    CHECK(st == SPECDEC_E_BUFFER_TOO_SMALL && len == strlen(ref_text), "text measure: %s len %zu",
          specdec_status_name(st), len);
    memset(text, 'x', sizeof text);
    st = specdec_transcribe(session, audio, n_audio, NULL, "en", NULL, &p, text, len, &len, NULL);
    CHECK(st == SPECDEC_E_BUFFER_TOO_SMALL && text[0] == 'x', "no room for the NUL: %s", specdec_status_name(st));
    CHECK(strstr(specdec_last_error(), "out_capacity") != NULL, "message: %s", specdec_last_error());
    st = specdec_transcribe(session, audio, n_audio, NULL, "en", NULL, &p, text, len + 1, &len, NULL);
    CHECK(st == SPECDEC_OK && !strcmp(text, ref_text), "exact buffer: %s", specdec_status_name(st));
    ids[0] = -7;
    st = specdec_transcribe_ids(session, audio, n_audio, NULL, "en", NULL, &p, ids, 1, &len, NULL);
    CHECK(st == SPECDEC_E_BUFFER_TOO_SMALL && len == n_greedy && ids[0] == -7, "ids: %s", specdec_status_name(st));
    st = specdec_transcribe_ids(session, audio, n_audio, NULL, "en", NULL, &p, NULL, 0, &len, NULL);
    CHECK(st == SPECDEC_E_BUFFER_TOO_SMALL && len == n_greedy, "ids measure: %s", specdec_status_name(st));
    return healthy("measuring");
}

static int case_bad_pointers(void)
{
    char text[64];
    size_t len;
    specdec_params p = greedy_params();
    CALL(both_refuse("NULL session", NULL, audio, n_audio, NULL, "en", NULL, &p, "session is NULL"));
    CALL(both_refuse("NULL pcm", session, NULL, 100, NULL, "en", NULL, &p, "pcm is NULL but n_samples is 100"));
    CALL(both_refuse("no audio", session, NULL, 0, NULL, "en", NULL, &p, "no audio"));
    CALL(both_refuse("0 samples", session, audio, 0, NULL, "en", NULL, &p, "n_samples is 0"));
    CALL(both_refuse("both inputs", session, audio, n_audio, wav_path, "en", NULL, &p, "exactly one"));
    CALL(expect_failure("NULL out_len", specdec_transcribe(session, audio, n_audio, NULL, "en", NULL, &p, text,
                                                           sizeof text, NULL, NULL), "specdec_transcribe",
                        "out_len is NULL"));
    CALL(expect_failure("NULL out_text", specdec_transcribe(session, audio, n_audio, NULL, "en", NULL, &p, NULL,
                                                            sizeof text, &len, NULL), "specdec_transcribe",
                        "out_text is NULL"));
    return healthy("NULL pointers");
}

static int case_bad_samples(void)
{
    float *copy;
    specdec_params p = greedy_params();
    int ok;
    CHECK(window >= n_audio, "the window is unknown (audio_info failed?)");
    copy = malloc(window * 2 * sizeof *copy);
    CHECK(copy != NULL, "malloc");
    memcpy(copy, audio, n_audio * sizeof *copy);
    copy[7] = NAN;
    copy[9] = NAN;
    ok = both_refuse("NaN", session, copy, n_audio, NULL, "en", NULL, &p, "2 NaN and 0 infinite samples of");
    if (ok && strstr(specdec_last_error(), "(the first at index 7)") == NULL) {
        snprintf(detail, sizeof detail, "NaN: the index is not named: %s", specdec_last_error());
        ok = 0;
    }
    copy[7] = copy[9] = audio[7];
    copy[n_audio - 1] = -INFINITY;
    ok = ok && both_refuse("inf", session, copy, n_audio, NULL, "en", NULL, &p, "0 NaN and 1 infinite");
    memset(copy, 0, window * 2 * sizeof *copy);
    /* lengths past the caller's buffer, refused before the buffer is read: one sample more than the longest audio
       a request takes (longer than the window is fine: case long_audio), and far more */
    ok = ok && both_refuse("over 4 h", session, copy, (size_t)SPECDEC_MAX_AUDIO_SECONDS * 16000 + 1, NULL, "en", NULL,
                           &p, "SPECDEC_MAX_AUDIO_SECONDS");
    ok = ok && both_refuse("huge n_samples", session, copy, (size_t)1 << 40, NULL, "en", NULL, &p,
                           "split the recording");
    free(copy);
    return ok && healthy("bad samples");
}

static int case_bad_language_and_task(void)
{
    specdec_params p = greedy_params();
    CALL(both_refuse("language", session, audio, n_audio, NULL, "xx", NULL, &p, "language 'xx'"));
    CALL(both_refuse("empty language", session, audio, n_audio, NULL, "", NULL, &p, "language"));
    CALL(both_refuse("task", session, audio, n_audio, NULL, "en", "summarize", &p, "task 'summarize'"));
    CALL(both_refuse("UTF-8", session, audio, n_audio, NULL, "\xff\xfe", NULL, &p, "language is not valid UTF-8"));
    return healthy("a bad language or task");
}

static int case_bad_params(void)
{
    specdec_params p = greedy_params();
    p.temperature = NAN;
    CALL(both_refuse("temperature", session, audio, n_audio, NULL, "en", NULL, &p, "temperature"));
    p = greedy_params();
    p.gamma = 99;
    CALL(both_refuse("gamma", session, audio, n_audio, NULL, "en", NULL, &p, "gamma"));
    p = greedy_params();
    p.draft = "nosuchdraft";
    CALL(both_refuse("draft", session, audio, n_audio, NULL, "en", NULL, &p, "nosuchdraft"));
    p = greedy_params();
    p.struct_size = 0;
    CALL(both_refuse("struct_size", session, audio, n_audio, NULL, "en", NULL, &p, "struct_size is 0"));
    return healthy("bad params");
}

static int case_bad_wav_files(void)
{
    specdec_params p = greedy_params();
    CALL(both_refuse("missing", session, NULL, 0, "/nonexistent/clip.wav", "en", NULL, &p, "does not exist"));
    CALL(both_refuse("44.1 kHz", session, NULL, 0, bad_wav_path, "en", NULL, &p, "44100 Hz"));
    CALL(both_refuse("not a file", session, NULL, 0, "/", "en", NULL, &p, "is a directory"));
    CALL(both_refuse("empty path", session, NULL, 0, "", "en", NULL, &p, "does not exist"));
    return healthy("bad WAV files");
}

static int ignore_piece(const int32_t *ids, size_t n, const char *text, size_t len, void *user)
{
    (void)ids, (void)n, (void)text, (void)len, (void)user;
    return 0;
}

static int case_whisper_refuses_prompts(void)
{
    static const int32_t input[] = {10, 11, 1};
    int32_t out[MAX_IDS];
    char text[256];
    size_t len, lengths[1], count;
    specdec_params p = greedy_params();
    const char *needle = "specdec_transcribe";
    CALL(expect_failure("text", specdec_generate_text(session, "w10 w11", &p, text, sizeof text, &len, NULL),
                        "specdec_generate_text", needle));
    CALL(expect_failure("ids", specdec_generate_ids(session, input, 3, &p, out, MAX_IDS, &len, NULL),
                        "specdec_generate_ids", "Whisper export"));
    CALL(expect_failure("stream", specdec_stream(session, "w10", NULL, 0, &p, ignore_piece, NULL, NULL),
                        "specdec_stream", needle));
    CALL(expect_failure("sequences", specdec_generate_sequences(session, NULL, input, 3, &p, out, MAX_IDS, &len,
                                                                lengths, NULL, 1, &count, NULL),
                        "specdec_generate_sequences", needle));
    return healthy("prompts to a Whisper session");
}

static int case_text_session_refuses_audio(void)
{
    static const int32_t input[] = {20, 30, 1};
    specdec_session *t5 = NULL;
    int32_t before[MAX_IDS], after[MAX_IDS];
    size_t n_before = 0, n_after = 0;
    specdec_params p = greedy_params();
    int ok;
    CHECK(specdec_open(t5_dir, OPTIONS, &t5) == SPECDEC_OK, "open T5: %s", specdec_last_error());
    ok = specdec_generate_ids(t5, input, 3, &p, before, MAX_IDS, &n_before, NULL) == SPECDEC_OK &&
         both_refuse("audio", t5, audio, n_audio, NULL, "en", NULL, &p, "text model") &&
         both_refuse("wav", t5, NULL, 0, wav_path, NULL, NULL, &p, "specdec_generate_text") &&
         specdec_generate_ids(t5, input, 3, &p, after, MAX_IDS, &n_after, NULL) == SPECDEC_OK;
    specdec_close(t5);
    if (!ok && detail[0] == '\0')
        FAIL("the T5 session failed: %s", specdec_last_error());
    if (!ok)
        return 0;
    CHECK(n_before == n_after && !memcmp(before, after, n_before * sizeof *before), "the T5 session changed");
    return healthy("audio to a T5 session");
}

static int case_closed_session(void)
{
    specdec_session *s = NULL;
    specdec_params p = greedy_params();
    CHECK(specdec_open(t5_dir, OPTIONS, &s) == SPECDEC_OK, "open: %s", specdec_last_error());
    specdec_close(s);
    CALL(both_refuse("closed", s, audio, n_audio, NULL, "en", NULL, &p, "not open"));
    return healthy("a closed session");
}

/* ---- API version 7: audio longer than the window, segments with times ------------------------------------- */

static int case_segments(void)
{
    static struct segments cut, lng, lng_wav, other;
    specdec_params p = greedy_params();
    size_t i, open = 0;
    CALL(print_segments("short", stamped, audio, n_audio, NULL, &p, &ref_segments));
    CHECK(ref_segments.count > 0 && ref_segments.len > 0, "AUDIO.f32 gave no segment");
    CALL(print_segments("cut", stamped, cut_audio, n_cut, NULL, &p, &cut));
    for (i = 0; i < cut.count; i++)
        open += isnan(cut.ends[i]) != 0;
    CHECK(cut.count > 0 && open == 1 && isnan(cut.ends[cut.count - 1]), "CUT.f32: %zu of %zu segments end in NaN; "
          "the last one (only) must", open, cut.count);
    CALL(print_segments("long", stamped, long_audio, n_long, NULL, &p, &lng));
    for (i = 0; i < lng.count; i++)
        CHECK(!isnan(lng.ends[i]) && lng.starts[i] <= lng.ends[i], "long audio: segment %zu is [%g, %g]", i,
              lng.starts[i], lng.ends[i]);
    CHECK(get_segments(stamped, NULL, 0, long_wav_path, &p, &lng_wav, NULL) == SPECDEC_OK &&
          same_segments(&lng, &lng_wav), "LONG.wav's segments differ from LONG.f32's: %s", specdec_last_error());
    p = sampled_params();
    CALL(print_segments("sampled", stamped, audio, n_audio, NULL, &p, &other));
    p = greedy_params();
    p.draft = "none";
    CALL(print_segments("target_only", stamped, audio, n_audio, NULL, &p, &other));
    CHECK(same_segments(&other, &ref_segments), "target-only segments differ from the draft's");
    have_ref_segments = 1;
    return healthy("the segments");
}

static int case_long_audio(void)
{
    int32_t ids[MAX_NEW];
    size_t n_plain = 0, n_wav = 0, n_stamped = 0, len = 0;
    specdec_params p = greedy_params();
    specdec_status st;
    CHECK(window > 0 && n_long > 2 * window, "LONG.f32 is %zu samples, not more than two windows of %zu", n_long,
          window);
    CALL(long_reference("long_plain", session, NULL, &p, &n_plain));
    CALL(long_reference("long_plain_wav", session, long_wav_path, &p, &n_wav));
    CALL(long_reference("long_stamped", stamped, NULL, &p, &n_stamped));
    /* max_new_tokens counts per window: a buffer of that many ids is too small for the recording, and says so */
    ids[0] = -7;
    st = specdec_transcribe_ids(stamped, long_audio, n_long, NULL, "en", NULL, &p, ids, MAX_NEW, &len, NULL);
    CHECK(n_stamped > MAX_NEW, "the long audio's %zu ids fit in max_new_tokens %d", n_stamped, MAX_NEW);
    CALL(one_line_refusal("long ids", st, SPECDEC_E_BUFFER_TOO_SMALL, "specdec_transcribe_ids", "out_capacity",
                          "CAPI_WHISPER_VERBOSE"));
    CHECK(len == n_stamped && ids[0] == -7, "long ids: *out_len %zu (want %zu), or the buffer written", len,
          n_stamped);
    return healthy("long audio");
}

static int case_segments_measure(void)
{
    static struct segments got;
    specdec_params p = greedy_params();
    specdec_stats stats = specdec_stats_empty();
    const struct segments *ref = &ref_segments;
    size_t len = 0, count = 0;
    specdec_status st;
    CHECK(have_ref_segments, "no reference segments (case segments failed?)");
    st = specdec_transcribe_segments(stamped, audio, n_audio, NULL, "en", NULL, &p, NULL, 0, &len, NULL, NULL, NULL,
                                     0, &count, &stats);
    CALL(one_line_refusal("measure", st, SPECDEC_E_BUFFER_TOO_SMALL, "specdec_transcribe_segments", "max_segments",
                          "CAPI_WHISPER_VERBOSE"));
    CHECK(len == ref->len && count == ref->count && stats.new_tokens > 0 && stats.stop_reason != SPECDEC_STOP_NONE,
          "measure: *out_len %zu, *out_count %zu (want %zu, %zu), stats not filled?", len, count, ref->len,
          ref->count);
    /* one segment fewer than needed, then room for every byte but the last NUL: nothing written */
    memset(&got, 'x', sizeof got);
    got.starts[0] = got.ends[0] = -7.0;
    got.lengths[0] = 777;
    st = specdec_transcribe_segments(stamped, audio, n_audio, NULL, "en", NULL, &p, got.text, sizeof got.text, &len,
                                     got.starts, got.ends, got.lengths, ref->count - 1, &count, NULL);
    CALL(one_line_refusal("max_segments", st, SPECDEC_E_BUFFER_TOO_SMALL, "specdec_transcribe_segments",
                          "max_segments", "CAPI_WHISPER_VERBOSE"));
    CHECK(count == ref->count && len == ref->len, "max_segments: sizes not reported");
    st = specdec_transcribe_segments(stamped, audio, n_audio, NULL, "en", NULL, &p, got.text, ref->len, &len,
                                     got.starts, got.ends, got.lengths, MAX_SEGMENTS, &count, NULL);
    CALL(one_line_refusal("no room for the NUL", st, SPECDEC_E_BUFFER_TOO_SMALL, "specdec_transcribe_segments",
                          "out_capacity", "CAPI_WHISPER_VERBOSE"));
    CHECK(got.text[0] == 'x' && got.starts[0] == -7.0 && got.ends[0] == -7.0 && got.lengths[0] == 777,
          "written although the buffers were too small");
    /* exactly large enough */
    st = specdec_transcribe_segments(stamped, audio, n_audio, NULL, "en", NULL, &p, got.text, ref->len + 1, &got.len,
                                     got.starts, got.ends, got.lengths, ref->count, &got.count, NULL);
    CHECK(st == SPECDEC_OK && same_segments(&got, ref), "exact buffers: %s %s", specdec_status_name(st),
          specdec_last_error());
    return healthy("measuring segments");
}

/* specdec_transcribe_segments refuses a NULL output pointer: a bad argument, nothing written, stats zeroed */
static int segments_refuse(const char *what, char *text, size_t capacity, size_t *len, double *starts, double *ends,
                           size_t *lengths, size_t max_segments, size_t *count, const char *needle)
{
    specdec_params p = greedy_params();
    specdec_stats stats = specdec_stats_empty();
    stats.new_tokens = 99;
    CALL(expect_failure(what, specdec_transcribe_segments(stamped, audio, n_audio, NULL, "en", NULL, &p, text,
                                                          capacity, len, starts, ends, lengths, max_segments, count,
                                                          &stats), "specdec_transcribe_segments", needle));
    CHECK(stats.new_tokens == 0 && stats.stop_reason == SPECDEC_STOP_NONE, "%s: stats not zeroed", what);
    CHECK((text == NULL || !strcmp(text, "untouched")) && (starts == NULL || starts[0] == -7.0) &&
          (ends == NULL || ends[0] == -7.0) && (lengths == NULL || lengths[0] == 777), "%s: written", what);
    return 1;
}

static int case_segments_bad_pointers(void)
{
    char text[256] = "untouched";
    double starts[4] = {-7.0}, ends[4] = {-7.0};
    size_t lengths[4] = {777}, len, count;
    CALL(segments_refuse("NULL out_len", text, sizeof text, NULL, starts, ends, lengths, 4, &count,
                         "out_len is NULL"));
    CALL(segments_refuse("NULL out_count", text, sizeof text, &len, starts, ends, lengths, 4, NULL,
                         "out_count is NULL"));
    CALL(segments_refuse("NULL out_text", NULL, sizeof text, &len, starts, ends, lengths, 4, &count,
                         "out_text is NULL but out_capacity is 256"));
    CALL(segments_refuse("NULL out_starts", text, sizeof text, &len, NULL, ends, lengths, 4, &count,
                         "out_starts is NULL but max_segments is 4"));
    CALL(segments_refuse("NULL out_ends", text, sizeof text, &len, starts, NULL, lengths, 4, &count,
                         "out_ends is NULL but max_segments is 4"));
    CALL(segments_refuse("NULL out_text_lengths", text, sizeof text, &len, starts, ends, NULL, 4, &count,
                         "out_text_lengths is NULL but max_segments is 4"));
    CALL(segments_refuse("all NULL", NULL, 0, NULL, NULL, NULL, NULL, 0, NULL, "out_len is NULL"));
    return healthy("NULL segment outputs");
}

static int case_segments_without_timestamps(void)
{
    char text[256] = "untouched";
    double starts[4] = {-7.0}, ends[4] = {-7.0};
    size_t lengths[4] = {777}, len = 12345, count = 12345;
    specdec_params p = greedy_params();
    specdec_status st;
    st = specdec_transcribe_segments(session, audio, n_audio, NULL, "en", NULL, &p, text, sizeof text, &len, starts,
                                     ends, lengths, 4, &count, NULL);
    CALL(expect_failure("no timestamp tokens", st, "specdec_transcribe_segments", "has no timestamp tokens"));
    CHECK(strstr(specdec_last_error(), "use specdec_transcribe") != NULL, "the fix is not named: %s",
          specdec_last_error());
    CHECK(!strcmp(text, "untouched") && starts[0] == -7.0 && ends[0] == -7.0 && lengths[0] == 777,
          "written on failure");
    st = specdec_transcribe_segments(session, NULL, 0, long_wav_path, NULL, NULL, NULL, text, sizeof text, &len,
                                     starts, ends, lengths, 4, &count, NULL);
    CALL(expect_failure("no timestamp tokens, a WAV file", st, "specdec_transcribe_segments",
                        "has no timestamp tokens"));
    return healthy("segments of a model without timestamp tokens");
}

/* ---- main ------------------------------------------------------------------------------------------------ */

static int fuzz(int argc, char **argv)
{
    specdec_params p = greedy_params(), good = greedy_params();
    int32_t out[MAX_IDS];
    char text[4096];
    size_t len = 0;
    int i;
    p.max_new_tokens = 4;
    if (specdec_transcribe_ids(session, audio, n_audio, NULL, "en", NULL, &good, ref_greedy, MAX_IDS, &n_greedy,
                               NULL) != SPECDEC_OK) {
        fprintf(stderr, "reference failed: %s\n", specdec_last_error());
        return 2;
    }
    for (i = 4; i < argc; i++) {
        specdec_status st = specdec_transcribe(session, NULL, 0, argv[i], "en", NULL, &p, text, sizeof text, &len,
                                               NULL);
        if (st == SPECDEC_OK)
            printf("case %d ok %s\n", i - 4, text);
        else
            printf("case %d refused %s %s\n", i - 4, specdec_status_name(st), specdec_last_error());
        fflush(stdout);
        st = specdec_transcribe_ids(session, audio, n_audio, NULL, "en", NULL, &good, out, MAX_IDS, &len, NULL);
        if (st == SPECDEC_OK && len == n_greedy && !memcmp(out, ref_greedy, len * sizeof *out))
            printf("case %d good same\n", i - 4);
        else
            printf("case %d good differs %s %s\n", i - 4, specdec_status_name(st), specdec_last_error());
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct { const char *name; int (*run)(void); } cases[] = {
        {"references", case_references}, {"segments", case_segments}, {"wav_equals_pcm", case_wav_equals_pcm},
        {"audio_info", case_audio_info}, {"long_audio", case_long_audio}, {"measure_only", case_measure_only},
        {"segments_measure", case_segments_measure}, {"bad_pointers", case_bad_pointers},
        {"segments_bad_pointers", case_segments_bad_pointers},
        {"segments_without_timestamps", case_segments_without_timestamps},
        {"bad_samples", case_bad_samples}, {"bad_language_and_task", case_bad_language_and_task},
        {"bad_params", case_bad_params}, {"bad_wav_files", case_bad_wav_files},
        {"whisper_refuses_prompts", case_whisper_refuses_prompts},
        {"text_session_refuses_audio", case_text_session_refuses_audio}, {"closed_session", case_closed_session},
    };
    int fuzzing = argc > 1 && !strcmp(argv[1], "--fuzz");
    size_t i;
    if (argc < (fuzzing ? 4 : 10)) {
        fprintf(stderr, "usage: capi_whisper WHISPER_EXPORT T5_EXPORT AUDIO.f32 AUDIO.wav BAD.wav STAMPED_EXPORT "
                        "CUT.f32 LONG.f32 LONG.wav\n"
                        "       capi_whisper --fuzz WHISPER_EXPORT AUDIO.f32 WAV...\n");
        return 2;
    }
    audio = read_samples(argv[3], &n_audio);
    if (audio == NULL || n_audio == 0 || specdec_open(argv[fuzzing ? 2 : 1], OPTIONS, &session) != SPECDEC_OK) {
        fprintf(stderr, "setup failed: %s\n", specdec_last_error());
        return 2;
    }
    if (fuzzing) {
        if (fuzz(argc, argv))
            return 2;
    } else {
        t5_dir = argv[2];
        wav_path = argv[4];
        bad_wav_path = argv[5];
        long_wav_path = argv[9];
        cut_audio = read_samples(argv[7], &n_cut);
        long_audio = read_samples(argv[8], &n_long);
        if (cut_audio == NULL || long_audio == NULL || specdec_open(argv[6], OPTIONS, &stamped) != SPECDEC_OK) {
            fprintf(stderr, "setup failed: %s\n", specdec_last_error());
            return 2;
        }
        printf("api: %d\n", SPECDEC_API_VERSION);
        for (i = 0; i < sizeof cases / sizeof *cases; i++) {
            detail[0] = '\0';
            if (cases[i].run())
                printf("ok %s\n", cases[i].name);
            else
                printf("not ok %s: %s\n", cases[i].name, detail);
            fflush(stdout);
        }
    }
    specdec_close(session);
    specdec_close(stamped);
    free(audio);
    free(cut_audio);
    free(long_audio);
    return 0;
}
