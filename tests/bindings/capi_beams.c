/* Beam search through the C API (API version 4), driven by tests/bindings/test_capi_beams.py:
 *
 *   capi_beams EXPORT_DIR SPEC...
 *
 * Opens one session ({"provider": "cpu", "threads": 1}) and runs each SPEC on it, in order, printing one JSON line
 * per SPEC with what the call returned, so that the test can compare it with the Python API and check that the
 * session still works after a failure (by running a good SPEC after a bad one).
 *
 * A SPEC is "key=value" pairs separated by ';'. Keys:
 *   call=sequences|ids|text|stream|decode     which function (default sequences: specdec_generate_sequences)
 *   input=20,30,1 | prompt=TEXT               the encoder input (ids, or text for text/stream/sequences)
 *   ids=5,6                                   decode's input ("ids=" is the empty list)
 *   any specdec_params field (max_new_tokens, gamma, draft, temperature, top_k, top_p, lenience, seed, num_beams,
 *     length_penalty, early_stopping, num_return_sequences, min_new_tokens, no_repeat_ngram_size); draft=NULL
 *   layout=v2|v3|num_beams|early_stopping     params ending before `draft` (v2), before num_beams (v3), or just
 *   | struct_size=N                           after that field; the bytes past struct_size are 0xFF (a library that
 *                                             read them would see num_beams -1, a NaN length_penalty)
 *   params=NULL                               pass no params (the defaults)
 *   null=out_len|out_count|out_lengths|out_ids|session|ids   pass NULL for that argument
 *   out_capacity=N, max_sequences=N           smaller output buffers (default: large enough)
 *   scores=NULL                               pass out_scores NULL
 *
 * Output line: {"status": NAME, "error": last error, "count": *out_count, "len": *out_len, "sequences": [[ids]...],
 * "scores": [...], "texts": [specdec_decode of each sequence], "text": ..., "pieces": callbacks run,
 * "stats": {...}}. Also a first line "sizes: ..." with the struct's layout.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec.h"

#define MAX_IDS 4096
#define MAX_SEQ 64

static void print_json_string(const char *s)
{
    putchar('"');
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static size_t parse_ids(const char *text, int32_t *out, size_t cap)
{
    size_t n = 0;
    char *end;
    while (*text && n < cap) {
        long v = strtol(text, &end, 10);
        if (end == text)
            break;
        out[n++] = (int32_t)v;
        text = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int pieces;

static int count_piece(const int32_t *ids, size_t n, const char *text, size_t len, void *user)
{
    (void)ids, (void)n, (void)text, (void)len, (void)user;
    pieces++;
    return 0;
}

static void run(specdec_session *session, char *spec)
{
    /* params: room for the struct and 0xFF past a smaller struct_size */
    union { specdec_params p; unsigned char bytes[sizeof(specdec_params) + 64]; } params;
    specdec_params *p = &params.p;
    const char *call = "sequences", *prompt = NULL, *null = "";
    static int32_t input[MAX_IDS], ids[MAX_IDS], out[MAX_IDS];
    static char text[65536], seqtext[65536];
    static char draft[256];
    size_t n_input = 0, n_ids = 0, struct_size = sizeof *p, out_capacity = MAX_IDS, max_sequences = MAX_SEQ;
    size_t lengths[MAX_SEQ], len = 12345, count = 12345, i, j, at;
    double scores[MAX_SEQ];
    int no_params = 0, no_scores = 0, have_input = 0;
    specdec_stats stats = specdec_stats_empty();
    specdec_status st;
    char *pair, *save = NULL;

    pieces = 0;
    *p = specdec_params_default();
    for (pair = strtok_r(spec, ";", &save); pair; pair = strtok_r(NULL, ";", &save)) {
        char *value = strchr(pair, '=');
        if (!value)
            continue;
        *value++ = '\0';
        if (!strcmp(pair, "call")) call = value;
        else if (!strcmp(pair, "input")) { n_input = parse_ids(value, input, MAX_IDS); have_input = 1; }
        else if (!strcmp(pair, "prompt")) prompt = value;
        else if (!strcmp(pair, "ids")) n_ids = parse_ids(value, ids, MAX_IDS);
        else if (!strcmp(pair, "max_new_tokens")) p->max_new_tokens = atoi(value);
        else if (!strcmp(pair, "gamma")) p->gamma = atoi(value);
        else if (!strcmp(pair, "draft")) {
            snprintf(draft, sizeof draft, "%s", value);
            p->draft = strcmp(value, "NULL") ? draft : NULL;
        }
        else if (!strcmp(pair, "temperature")) p->temperature = atof(value);
        else if (!strcmp(pair, "top_k")) p->top_k = atoi(value);
        else if (!strcmp(pair, "top_p")) p->top_p = atof(value);
        else if (!strcmp(pair, "lenience")) p->lenience = atof(value);
        else if (!strcmp(pair, "seed")) p->seed = strtoull(value, NULL, 10);
        else if (!strcmp(pair, "num_beams")) p->num_beams = atoi(value);
        else if (!strcmp(pair, "length_penalty")) p->length_penalty = atof(value);
        else if (!strcmp(pair, "early_stopping")) p->early_stopping = atoi(value);
        else if (!strcmp(pair, "num_return_sequences")) p->num_return_sequences = atoi(value);
        else if (!strcmp(pair, "min_new_tokens")) p->min_new_tokens = atoi(value);
        else if (!strcmp(pair, "no_repeat_ngram_size")) p->no_repeat_ngram_size = atoi(value);
        else if (!strcmp(pair, "layout"))       /* the struct ends before `draft`, before num_beams, or after a field */
            struct_size = !strcmp(value, "v2") ? offsetof(specdec_params, draft)
                          : !strcmp(value, "v3") ? offsetof(specdec_params, num_beams)
                          : !strcmp(value, "num_beams") ? offsetof(specdec_params, num_beams) + sizeof p->num_beams
                          : offsetof(specdec_params, early_stopping) + sizeof p->early_stopping;
        else if (!strcmp(pair, "struct_size")) struct_size = (size_t)atol(value);
        else if (!strcmp(pair, "params")) no_params = 1;
        else if (!strcmp(pair, "null")) null = value;
        else if (!strcmp(pair, "out_capacity")) out_capacity = (size_t)atol(value);
        else if (!strcmp(pair, "max_sequences")) max_sequences = (size_t)atol(value);
        else if (!strcmp(pair, "scores")) no_scores = 1;
    }
    if (struct_size < sizeof *p) {
        memset(params.bytes + struct_size, 0xFF, sizeof params.bytes - struct_size);
        p->struct_size = struct_size;
    }
    if (!strcmp(null, "session"))
        session = NULL;
#define ARG(name, value) (!strcmp(null, name) ? NULL : (value))
    if (!strcmp(call, "sequences"))
        st = specdec_generate_sequences(session, prompt, have_input ? ARG("ids", input) : NULL, n_input,
                                        no_params ? NULL : p, ARG("out_ids", out), out_capacity, ARG("out_len", &len),
                                        ARG("out_lengths", lengths), no_scores ? NULL : scores, max_sequences,
                                        ARG("out_count", &count), &stats);
    else if (!strcmp(call, "ids"))
        st = specdec_generate_ids(session, input, n_input, no_params ? NULL : p, out, out_capacity, &len, &stats);
    else if (!strcmp(call, "text"))
        st = specdec_generate_text(session, prompt, no_params ? NULL : p, text, sizeof text, &len, &stats);
    else if (!strcmp(call, "stream"))
        st = specdec_stream(session, prompt, have_input ? input : NULL, n_input, no_params ? NULL : p, count_piece,
                            NULL, &stats);
    else
        st = specdec_decode(session, ARG("ids", ids), n_ids, text, out_capacity < sizeof text ? out_capacity
                                                                                              : sizeof text,
                            ARG("out_len", &len));
#undef ARG

    printf("{\"call\": ");
    print_json_string(call);
    printf(", \"status\": \"%s\", \"error\": ", specdec_status_name(st));
    print_json_string(specdec_last_error());
    printf(", \"len\": %zu, \"count\": %zu, \"pieces\": %d", len, count, pieces);
    if (st == SPECDEC_OK && !strcmp(call, "sequences")) {
        printf(", \"sequences\": [");
        for (i = 0, at = 0; i < count; at += lengths[i], i++) {
            printf("%s[", i ? ", " : "");
            for (j = 0; j < lengths[i]; j++)
                printf("%s%d", j ? ", " : "", (int)out[at + j]);
            printf("]");
        }
        printf("], \"scores\": [");
        for (i = 0; i < count && !no_scores; i++) {
            if (isnan(scores[i]))
                printf("%sNaN", i ? ", " : "");
            else
                printf("%s%.17g", i ? ", " : "", scores[i]);
        }
        printf("], \"texts\": [");
        for (i = 0, at = 0; i < count; at += lengths[i], i++) {
            size_t n = 0;
            specdec_status ds = specdec_decode(session, out + at, lengths[i], seqtext, sizeof seqtext, &n);
            printf("%s", i ? ", " : "");
            print_json_string(ds == SPECDEC_OK && n == strlen(seqtext) ? seqtext : specdec_last_error());
        }
        printf("]");
    }
    if (st == SPECDEC_OK && !strcmp(call, "ids")) {
        printf(", \"sequences\": [[");
        for (j = 0; j < len; j++)
            printf("%s%d", j ? ", " : "", (int)out[j]);
        printf("]]");
    }
    if (st == SPECDEC_OK && (!strcmp(call, "text") || !strcmp(call, "decode"))) {
        printf(", \"text\": ");
        print_json_string(text);
    }
    printf(", \"stats\": {\"new_tokens\": %lld, \"target_calls\": %lld, \"draft_calls\": %lld, \"proposed\": %lld, "
           "\"accepted\": %lld, \"stop_reason\": %d, \"total_s\": %.17g}}\n", (long long)stats.new_tokens,
           (long long)stats.target_calls, (long long)stats.draft_calls, (long long)stats.proposed,
           (long long)stats.accepted, (int)stats.stop_reason, stats.total_s);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    specdec_session *session = NULL;
    specdec_params d = specdec_params_default();
    int i;
    if (argc < 2) {
        fprintf(stderr, "usage: capi_beams EXPORT_DIR SPEC...\n");
        return 2;
    }
    printf("sizes: api=%d params=%zu params_min=%zu num_beams=%zu length_penalty=%zu early_stopping=%zu "
           "num_return_sequences=%zu min_new_tokens=%zu no_repeat_ngram_size=%zu\n", SPECDEC_API_VERSION,
           sizeof(specdec_params), (size_t)SPECDEC_PARAMS_SIZE_MIN, offsetof(specdec_params, num_beams),
           offsetof(specdec_params, length_penalty), offsetof(specdec_params, early_stopping),
           offsetof(specdec_params, num_return_sequences), offsetof(specdec_params, min_new_tokens),
           offsetof(specdec_params, no_repeat_ngram_size));
    printf("defaults: num_beams=%d length_penalty=%g early_stopping=%d num_return_sequences=%d min_new_tokens=%d "
           "no_repeat_ngram_size=%d enum=%d,%d,%d\n", (int)d.num_beams, d.length_penalty, (int)d.early_stopping,
           (int)d.num_return_sequences, (int)d.min_new_tokens, (int)d.no_repeat_ngram_size,
           SPECDEC_EARLY_STOPPING_FALSE, SPECDEC_EARLY_STOPPING_TRUE, SPECDEC_EARLY_STOPPING_NEVER);
    if (specdec_open(argv[1], "{\"provider\": \"cpu\", \"threads\": 1}", &session) != SPECDEC_OK) {
        fprintf(stderr, "open: %s\n", specdec_last_error());
        return 1;
    }
    for (i = 2; i < argc; i++)
        run(session, argv[i]);
    specdec_close(session);
    return 0;
}
