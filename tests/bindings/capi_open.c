/* Open untrusted export directories through the C API, with a good session open all along.
 *
 *   capi_open GOOD_EXPORT BAD_EXPORT...
 *
 * Opens GOOD_EXPORT and records its greedy output; then, for each BAD_EXPORT, calls specdec_open and prints
 *   "case I refused STATUS_NAME MESSAGE"    (the message is specdec_last_error(), which must be one line)
 *   "case I loaded"                         (the directory opened: a harmless mutation)
 * then "case I good same" or "case I good differs ..." once the good session has generated again, and for a
 * directory that opened, "case I run STATUS_NAME" after generating a few tokens from it (last, so that a crash there
 * is told apart from one while opening). Exits 0 when every line could be written, 2 when the good export cannot be
 * used; a crash shows as a signal to the caller (tests/bindings/test_capi_untrusted.py, which runs this once per fuzz
 * case and once for all hostile cases).
 */
#include <stdio.h>
#include <string.h>

#include "specdec.h"

#define MAX_NEW 8
static const int32_t prompt[] = {5, 6, 7, 1};

static specdec_status greedy(specdec_session *s, int32_t *out, size_t *len)
{
    specdec_params p = specdec_params_default();
    p.max_new_tokens = MAX_NEW;
    p.gamma = 2;
    p.draft = "draft";
    return specdec_generate_ids(s, prompt, sizeof prompt / sizeof *prompt, &p, out, MAX_NEW, len, NULL);
}

int main(int argc, char **argv)
{
    static const char *options = "{\"provider\": \"cpu\", \"threads\": 1}";
    specdec_session *good = NULL;
    int32_t ref[MAX_NEW], out[MAX_NEW];
    size_t n_ref = 0, n_out = 0;
    specdec_status st;
    int i;

    if (argc < 3) {
        fprintf(stderr, "usage: capi_open GOOD_EXPORT BAD_EXPORT...\n");
        return 2;
    }
    st = specdec_open(argv[1], options, &good);
    if (st != SPECDEC_OK || greedy(good, ref, &n_ref) != SPECDEC_OK) {
        printf("good failed %s %s\n", specdec_status_name(st), specdec_last_error());
        return 2;
    }
    for (i = 2; i < argc; i++) {
        specdec_session *bad = (specdec_session *)&bad;     /* must be set to NULL on failure */
        int opened;
        st = specdec_open(argv[i], options, &bad);
        opened = st == SPECDEC_OK;
        if (!opened) {
            const char *msg = specdec_last_error();
            printf("case %d refused %s %s%s\n", i - 2, specdec_status_name(st), msg,
                   bad != NULL ? " [out_session not NULL]" : "");
        } else {
            printf("case %d loaded\n", i - 2);
        }
        fflush(stdout);
        st = greedy(good, out, &n_out);
        if (st == SPECDEC_OK && n_out == n_ref && !memcmp(out, ref, n_ref * sizeof *ref))
            printf("case %d good same\n", i - 2);
        else
            printf("case %d good differs %s %s\n", i - 2, specdec_status_name(st), specdec_last_error());
        fflush(stdout);
        if (opened) {
            size_t len = 0;
            st = greedy(bad, out, &len);
            printf("case %d run %s\n", i - 2, specdec_status_name(st));
            fflush(stdout);
            specdec_close(bad);
        }
    }
    specdec_close(good);
    return 0;
}
