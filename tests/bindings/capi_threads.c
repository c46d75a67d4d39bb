/* Threads from a C host: the first calls racing to start Python, two sessions generating on two threads at once,
 * one session shared by several threads (serialized by the library), sessions opened and closed on threads.
 * Every output is compared with a reference generated beforehand on one thread.
 *
 *   capi_threads EXPORT_DIR [ROUNDS]
 *
 * Prints "ok NAME" or "not ok NAME: detail" per case (tests/bindings/test_capi_threads.py checks them).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "specdec.h"

#define N_JOBS 6
#define MAX_NEW 16
#define N_SHARED 4

typedef struct {
    int32_t prompt[8];
    size_t n_prompt;
    specdec_params params;
    int32_t ref[MAX_NEW];
    size_t n_ref;
} job;

static job jobs[N_JOBS];
static const char *export_dir;
static int rounds = 3;

typedef struct {
    specdec_session *session;
    int use_stream;
    int mismatches, failures;
    char detail[1024];
    specdec_status open_status;
    double busy_s;
} worker;

typedef struct {
    int32_t ids[MAX_NEW + 8];
    size_t n;
} collected;

static int collect(const int32_t *ids, size_t n, const char *text, size_t text_len, void *user)
{
    collected *c = (collected *)user;
    size_t i;
    (void)text; (void)text_len;
    for (i = 0; i < n && c->n < sizeof c->ids / sizeof c->ids[0]; i++)
        c->ids[c->n++] = ids[i];
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* generate every job `rounds` times and compare with the reference */
static void run_jobs(worker *w)
{
    int r, j;
    double began = now();
    for (r = 0; r < rounds; r++) {
        for (j = 0; j < N_JOBS; j++) {
            const job *jb = &jobs[(j + r) % N_JOBS];
            int32_t out[MAX_NEW];
            size_t len = 0;
            specdec_status st;
            if (w->use_stream && j % 2) {
                collected c;
                c.n = 0;
                st = specdec_stream(w->session, NULL, jb->prompt, jb->n_prompt, &jb->params, collect, &c, NULL);
                memcpy(out, c.ids, sizeof out);
                len = c.n;
            } else {
                st = specdec_generate_ids(w->session, jb->prompt, jb->n_prompt, &jb->params, out, MAX_NEW, &len, NULL);
            }
            if (st != SPECDEC_OK) {
                w->failures++;
                snprintf(w->detail, sizeof w->detail, "%s: %s", specdec_status_name(st), specdec_last_error());
            } else if (len != jb->n_ref || memcmp(out, jb->ref, len * sizeof *out)) {
                w->mismatches++;
                snprintf(w->detail, sizeof w->detail, "job %d: output differs from the reference", (j + r) % N_JOBS);
            }
        }
    }
    w->busy_s = now() - began;
}

static void *worker_main(void *arg)
{
    run_jobs((worker *)arg);
    return NULL;
}

static void *open_generate_close(void *arg)
{
    worker *w = (worker *)arg;
    w->open_status = specdec_open(export_dir, "{\"provider\": \"cpu\", \"threads\": 1}", &w->session);
    if (w->open_status != SPECDEC_OK) {
        snprintf(w->detail, sizeof w->detail, "open: %s", specdec_last_error());
        return NULL;
    }
    run_jobs(w);
    specdec_close(w->session);
    w->session = NULL;
    return NULL;
}

/* ---- overlap: thread X parks inside a stream callback of session A while thread Y generates ------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int x_parked, y_done, x_done;
static double park_limit_s;
static int y_done_while_parked;

typedef struct {
    specdec_session *session;
    specdec_status status;
} call;

static int parking_callback(const int32_t *ids, size_t n, const char *text, size_t text_len, void *user)
{
    struct timespec until;
    (void)ids; (void)n; (void)text; (void)text_len; (void)user;
    pthread_mutex_lock(&mu);
    if (!x_parked) {
        x_parked = 1;
        pthread_cond_broadcast(&cv);
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)park_limit_s;
        while (!y_done && pthread_cond_timedwait(&cv, &mu, &until) == 0)
            ;
        y_done_while_parked = y_done;
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

static void *x_main(void *arg)
{
    call *c = (call *)arg;
    c->status = specdec_stream(c->session, NULL, jobs[0].prompt, jobs[0].n_prompt, &jobs[0].params,
                               parking_callback, NULL, NULL);
    pthread_mutex_lock(&mu);
    x_done = 1;
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void *y_main(void *arg)
{
    call *c = (call *)arg;
    int32_t out[MAX_NEW];
    size_t len;
    pthread_mutex_lock(&mu);
    while (!x_parked)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    c->status = specdec_generate_ids(c->session, jobs[1].prompt, jobs[1].n_prompt, &jobs[1].params, out, MAX_NEW,
                                     &len, NULL);
    if (c->status == SPECDEC_OK && (len != jobs[1].n_ref || memcmp(out, jobs[1].ref, len * sizeof *out)))
        c->status = SPECDEC_E_INTERNAL;            /* wrong output */
    pthread_mutex_lock(&mu);
    y_done = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* Returns 1 if Y finished while X was parked in its callback (limit `limit_s` seconds). */
static int overlap(specdec_session *xs, specdec_session *ys, double limit_s, specdec_status *xst, specdec_status *yst)
{
    pthread_t tx, ty;
    call cx, cy;
    x_parked = y_done = x_done = y_done_while_parked = 0;
    park_limit_s = limit_s;
    cx.session = xs;
    cy.session = ys;
    pthread_create(&tx, NULL, x_main, &cx);
    pthread_create(&ty, NULL, y_main, &cy);
    pthread_join(tx, NULL);
    pthread_join(ty, NULL);
    *xst = cx.status;
    *yst = cy.status;
    return y_done_while_parked;
}

static int report(const char *name, worker *ws, int n)
{
    int i, bad = 0;
    for (i = 0; i < n; i++) {
        if (ws[i].open_status != SPECDEC_OK || ws[i].failures || ws[i].mismatches) {
            printf("not ok %s: thread %d: %d failures, %d mismatches, open %s; %s\n", name, i, ws[i].failures,
                   ws[i].mismatches, specdec_status_name(ws[i].open_status), ws[i].detail);
            bad = 1;
            break;
        }
    }
    if (!bad) {
        printf("ok %s (", name);
        for (i = 0; i < n; i++)
            printf("%sthread %d %.2fs", i ? ", " : "", i, ws[i].busy_s);
        printf(")\n");
    }
    fflush(stdout);
    return !bad;
}

int main(int argc, char **argv)
{
    pthread_t threads[N_SHARED];
    worker ws[N_SHARED];
    specdec_session *a = NULL, *b = NULL;
    int i, j;

    if (argc < 2) {
        fprintf(stderr, "usage: %s EXPORT_DIR [ROUNDS]\n", argv[0]);
        return 2;
    }
    export_dir = argv[1];
    if (argc > 2)
        rounds = atoi(argv[2]);

    for (j = 0; j < N_JOBS; j++) {
        static const int32_t prompts[][4] = {{20, 30, 1}, {5, 6, 7, 1}, {33, 1}, {40, 41, 42, 1}, {11, 12, 1}, {9, 1}};
        static const int lengths[] = {3, 4, 2, 4, 3, 2};
        /* fixed sources (draft "auto" at temperature > 0 would not be reproducible); tests/bindings/
           test_capi_threads.py uses the same */
        static const char *drafts[] = {"draft", "lookup,draft", "lookup", "draft", "lookup+draft", "none"};
        memcpy(jobs[j].prompt, prompts[j], sizeof prompts[j]);
        jobs[j].n_prompt = (size_t)lengths[j];
        jobs[j].params = specdec_params_default();
        jobs[j].params.max_new_tokens = MAX_NEW;
        jobs[j].params.gamma = 1 + j % 4;
        jobs[j].params.draft = drafts[j];
        if (j % 2) {                                /* half the jobs sample */
            jobs[j].params.temperature = 3.0;
            jobs[j].params.seed = (uint64_t)(100 + j);
        }
    }

    /* 1. the very first calls of the process, on N_SHARED threads at once: Python starts exactly once */
    memset(ws, 0, sizeof ws);
    rounds = rounds > 0 ? rounds : 1;
    {
        int saved = rounds;
        rounds = 0;                                 /* only open and close */
        for (i = 0; i < N_SHARED; i++)
            pthread_create(&threads[i], NULL, open_generate_close, &ws[i]);
        for (i = 0; i < N_SHARED; i++)
            pthread_join(threads[i], NULL);
        rounds = saved;
        report("first_calls_race_to_start_python", ws, N_SHARED);
    }

    /* references, sequentially on one thread */
    if (specdec_open(export_dir, "{\"provider\": \"cpu\", \"threads\": 1}", &a) != SPECDEC_OK ||
        specdec_open(export_dir, "{\"provider\": \"cpu\", \"threads\": 1}", &b) != SPECDEC_OK) {
        printf("not ok setup: %s\n", specdec_last_error());
        return 1;
    }
    for (j = 0; j < N_JOBS; j++) {
        if (specdec_generate_ids(a, jobs[j].prompt, jobs[j].n_prompt, &jobs[j].params, jobs[j].ref, MAX_NEW,
                                 &jobs[j].n_ref, NULL) != SPECDEC_OK) {
            printf("not ok setup: reference %d: %s\n", j, specdec_last_error());
            return 1;
        }
        printf("reference %d:", j);
        for (i = 0; i < (int)jobs[j].n_ref; i++)
            printf(" %d", (int)jobs[j].ref[i]);
        printf("\n");
    }

    /* 2. two sessions, two threads, at the same time (one streams half its jobs) */
    memset(ws, 0, sizeof ws);
    ws[0].session = a;
    ws[1].session = b;
    ws[1].use_stream = 1;
    for (i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, worker_main, &ws[i]);
    for (i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    report("two_sessions_two_threads", ws, 2);

    /* 3. one session shared by N_SHARED threads: calls are serialized, every output still exact */
    memset(ws, 0, sizeof ws);
    for (i = 0; i < N_SHARED; i++) {
        ws[i].session = a;
        ws[i].use_stream = i % 2;
    }
    for (i = 0; i < N_SHARED; i++)
        pthread_create(&threads[i], NULL, worker_main, &ws[i]);
    for (i = 0; i < N_SHARED; i++)
        pthread_join(threads[i], NULL);
    report("one_session_shared_by_threads", ws, N_SHARED);

    /* 4. sessions opened, used and closed on their own threads while the main sessions stay open */
    memset(ws, 0, sizeof ws);
    for (i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, open_generate_close, &ws[i]);
    for (i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    report("open_generate_close_on_threads", ws, 2);

    /* 5. two sessions really run at the same time: while X sits in a stream callback of session A, Y completes a
          whole generation on session B (neither a global lock nor the GIL is held across the callback) */
    {
        specdec_status xst, yst;
        int overlapped = overlap(a, b, 60, &xst, &yst);
        if (overlapped && xst == SPECDEC_OK && yst == SPECDEC_OK)
            printf("ok sessions_run_concurrently\n");
        else
            printf("not ok sessions_run_concurrently: overlapped=%d x=%s y=%s\n", overlapped,
                   specdec_status_name(xst), specdec_status_name(yst));
    }

    /* 6. one session is serialized: while X sits in a stream callback of session A, Y's call on A waits for it */
    {
        specdec_status xst, yst;
        int overlapped = overlap(a, a, 1, &xst, &yst);
        if (!overlapped && xst == SPECDEC_OK && yst == SPECDEC_OK)
            printf("ok one_session_is_serialized\n");
        else
            printf("not ok one_session_is_serialized: overlapped=%d x=%s y=%s\n", overlapped,
                   specdec_status_name(xst), specdec_status_name(yst));
    }
    fflush(stdout);

    specdec_close(a);
    specdec_close(b);
    return 0;
}
