/* specdec C example: open an export directory, generate (ids and text), stream, print stats.
 *
 *   specdec-example-c EXPORT_DIR [--text "PROMPT" | --ids 5,6,7,1] [--max-new-tokens N] [--gamma G|auto]
 *                     [--draft auto|none|lookup|draft|lookup,draft|...] [--temperature T] [--top-k K]
 *                     [--top-p P] [--lenience L] [--seed S] [--provider auto|cpu|cuda|tensorrt] [--threads N]
 *   specdec-example-c --check        start the library's Python and print its version (no export needed)
 *
 * Output, one item per line (the tests parse it):
 *   ids: <generated ids>            (with --ids)       text: <generated text>     (with --text)
 *   stream: [<ids of piece 1>] [<ids of piece 2>] ...
 *   stream_ids: <all streamed ids>  stream_text: <all streamed text>
 *   stats: ... sources: target_only_rounds=R lookup=R/P/A model=R/P/A chain=P/A time_ms: ...
 *          (rounds/proposed/accepted per kind of source)
 * Build: see bindings/README.md (gcc -std=c99 -Iinclude example.c -Lbuild -lspecdec -Wl,-rpath,...).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec.h"

#define MAX_PROMPT_IDS 1024

static int fail(const char *what, specdec_status status)
{
    fprintf(stderr, "error: %s failed with %s: %s\n", what, specdec_status_name(status), specdec_last_error());
    return 1;
}

static void print_stats(const char *label, const specdec_stats *s)
{
    printf("%s: new_tokens=%lld target_calls=%lld draft_calls=%lld ort_runs=%lld accepted=%lld/%lld "
           "acceptance_rate=%.3f tokens_per_target_call=%.2f stop=%s sources: target_only_rounds=%lld "
           "lookup=%lld/%lld/%lld model=%lld/%lld/%lld chain=%lld/%lld time_ms: total=%.2f encoder=%.2f "
           "draft=%.2f target=%.2f host=%.2f\n",
           label, (long long)s->new_tokens, (long long)s->target_calls, (long long)s->draft_calls,
           (long long)s->ort_runs, (long long)s->accepted, (long long)s->proposed, s->acceptance_rate,
           s->tokens_per_target_call, specdec_stop_reason_name(s->stop_reason), (long long)s->target_only_rounds,
           (long long)s->lookup_rounds, (long long)s->lookup_proposed, (long long)s->lookup_accepted,
           (long long)s->model_rounds, (long long)s->model_proposed, (long long)s->model_accepted,
           (long long)s->chain_proposed, (long long)s->chain_accepted, s->total_s * 1e3, s->encoder_s * 1e3,
           s->draft_s * 1e3, s->target_s * 1e3, s->host_s * 1e3);
}

/* The stream callback: collect the pieces (user_data) and print them as they arrive. */
typedef struct {
    int32_t *ids;
    size_t n_ids, capacity;
    char *text;
    size_t text_len;
} collected;

static int on_piece(const int32_t *token_ids, size_t n_tokens, const char *text, size_t text_len, void *user_data)
{
    collected *c = (collected *)user_data;
    size_t i;
    char *grown;
    printf("%s[", c->n_ids ? " " : "stream: ");
    for (i = 0; i < n_tokens; i++) {
        printf(i ? " %d" : "%d", (int)token_ids[i]);
        if (c->n_ids < c->capacity)
            c->ids[c->n_ids++] = token_ids[i];
    }
    printf("]");
    grown = (char *)realloc(c->text, c->text_len + text_len + 1);    /* copy: `text` dies after the return */
    if (grown == NULL)
        return 1;                                                     /* stop the generation */
    c->text = grown;
    memcpy(c->text + c->text_len, text, text_len + 1);
    c->text_len += text_len;
    return 0;
}

static size_t parse_ids(const char *s, int32_t *ids, size_t capacity)
{
    size_t n = 0;
    char *end;
    while (*s && n < capacity) {
        ids[n++] = (int32_t)strtol(s, &end, 10);
        if (end == s)
            return 0;
        s = (*end == ',') ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *export_dir = NULL, *text = NULL, *provider = "cpu";
    int32_t prompt_ids[MAX_PROMPT_IDS];
    size_t n_prompt = 0, i, out_len = 0;
    int threads = 0, a;
    char options[256];
    specdec_params params = specdec_params_default();     /* sets struct_size: always start from it */
    specdec_session *session = NULL;
    specdec_session_info info;
    specdec_stats stats = specdec_stats_empty();         /* sets struct_size */
    specdec_status status;
    collected c;

    for (a = 1; a < argc; a++) {
        const char *arg = argv[a], *val = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(arg, "--check")) {
            /* starts Python; a NULL export_dir must come back as a one-line argument error */
            status = specdec_open(NULL, NULL, &session);
            printf("libspecdec %s: %s (Python started; a NULL export_dir, as a test, answered: %s)\n",
                   specdec_version(), status == SPECDEC_E_INVALID_ARGUMENT ? "ok" : "FAILED", specdec_last_error());
            return status == SPECDEC_E_INVALID_ARGUMENT ? 0 : 1;
        }
        if (arg[0] != '-' || arg[1] != '-') { export_dir = arg; continue; }
        if (val == NULL) { fprintf(stderr, "error: %s needs a value\n", arg); return 2; }
        a++;
        if (!strcmp(arg, "--text")) text = val;
        else if (!strcmp(arg, "--ids")) n_prompt = parse_ids(val, prompt_ids, MAX_PROMPT_IDS);
        else if (!strcmp(arg, "--max-new-tokens")) params.max_new_tokens = atoi(val);
        else if (!strcmp(arg, "--gamma")) params.gamma = strcmp(val, "auto") ? atoi(val) : SPECDEC_GAMMA_AUTO;
        else if (!strcmp(arg, "--draft")) params.draft = val;     /* read during each call only */
        else if (!strcmp(arg, "--temperature")) params.temperature = atof(val);
        else if (!strcmp(arg, "--top-k")) params.top_k = atoi(val);
        else if (!strcmp(arg, "--top-p")) params.top_p = atof(val);
        else if (!strcmp(arg, "--lenience")) params.lenience = atof(val);
        else if (!strcmp(arg, "--seed")) params.seed = strtoull(val, NULL, 10);
        else if (!strcmp(arg, "--provider")) provider = val;
        else if (!strcmp(arg, "--threads")) threads = atoi(val);
        else { fprintf(stderr, "error: unknown option %s\n", arg); return 2; }
    }
    if (export_dir == NULL || (text == NULL) == (n_prompt == 0)) {
        fprintf(stderr, "usage: %s EXPORT_DIR (--text PROMPT | --ids 5,6,7,1) [--gamma G|auto] [--draft NAME] "
                        "[--temperature T] [--top-k K] [--top-p P] [--lenience L] [--seed S] [--max-new-tokens N] "
                        "[--provider P] [--threads N]\n", argv[0]);
        return 2;
    }

    snprintf(options, sizeof options, "{\"provider\": \"%s\", \"threads\": %d}", provider, threads);
    status = specdec_open(export_dir, options, &session);
    if (status != SPECDEC_OK)
        return fail("specdec_open", status);
    status = specdec_get_info(session, &info);
    if (status != SPECDEC_OK) {
        fail("specdec_get_info", status);
        specdec_close(session);
        return 1;
    }
    printf("specdec %s (C API %d), provider %s, gamma_max %d, max_length %d, vocab %d\n", specdec_version(),
           SPECDEC_API_VERSION, info.provider, (int)info.gamma_max, (int)info.max_length, (int)info.vocab_size);

    if (n_prompt) {
        /* max_new_tokens ids always suffice */
        size_t capacity = params.max_new_tokens > 0 ? (size_t)params.max_new_tokens : 1;
        int32_t *out = (int32_t *)malloc(sizeof(int32_t) * capacity);
        status = specdec_generate_ids(session, prompt_ids, n_prompt, &params, out, capacity, &out_len, &stats);
        if (status != SPECDEC_OK) {
            fail("specdec_generate_ids", status);       /* before specdec_close, which clears the error */
            free(out);
            specdec_close(session);
            return 1;
        }
        printf("ids:");
        for (i = 0; i < out_len; i++)
            printf(" %d", (int)out[i]);
        printf("\n");
        free(out);
    } else {
        /* text: try a small buffer, grow it to the length the library reports */
        size_t capacity = 16;
        char *out = (char *)malloc(capacity);
        status = specdec_generate_text(session, text, &params, out, capacity, &out_len, &stats);
        if (status == SPECDEC_E_BUFFER_TOO_SMALL) {
            capacity = out_len + 1;
            out = (char *)realloc(out, capacity);
            status = specdec_generate_text(session, text, &params, out, capacity, &out_len, &stats);
        }
        if (status != SPECDEC_OK) {
            fail("specdec_generate_text", status);
            free(out);
            specdec_close(session);
            return 1;
        }
        printf("text: %s\n", out);
        free(out);
    }
    print_stats("stats", &stats);

    memset(&c, 0, sizeof c);
    c.capacity = (size_t)info.max_length + 1;
    c.ids = (int32_t *)malloc(sizeof(int32_t) * c.capacity);
    status = specdec_stream(session, text, n_prompt ? prompt_ids : NULL, n_prompt, &params, on_piece, &c, &stats);
    printf("\n");
    if (status != SPECDEC_OK) {
        fail("specdec_stream", status);
        free(c.ids);
        free(c.text);
        specdec_close(session);
        return 1;
    }
    printf("stream_ids:");
    for (i = 0; i < c.n_ids; i++)
        printf(" %d", (int)c.ids[i]);
    printf("\nstream_text: %s\n", c.text ? c.text : "");
    print_stats("stream_stats", &stats);
    free(c.ids);
    free(c.text);

    specdec_close(session);
    specdec_close(NULL);            /* always safe */
    return 0;
}
