/* What the C test programs share. A case returns 1 when it passes, or 0 with `detail` saying why, through FAIL,
 * CHECK and CALL; one_line_refusal checks a failed call's status and message; greedy_params is the reproducible
 * request the cases compare against. Include after specdec.h, with MAX_NEW (the cases' max_new_tokens) defined. */
#ifndef CAPI_CASES_H
#define CAPI_CASES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char detail[8192];

#define FAIL(...) do { snprintf(detail, sizeof detail, __VA_ARGS__); return 0; } while (0)
#define CHECK(cond, ...) do { if (!(cond)) FAIL(__VA_ARGS__); } while (0)
#define CALL(expr) do { if (!(expr)) return 0; } while (0)

/* a fixed draft and gamma: reproducible also when sampling (draft "auto" at temperature > 0 is not) */
static inline specdec_params greedy_params(void)
{
    specdec_params p = specdec_params_default();
    p.max_new_tokens = MAX_NEW;
    p.gamma = 3;
    p.draft = "draft";
    return p;
}

/* The failed call returned `want`, with a one-line message that starts with `function` and holds `needle` (NULL:
 * anything). With the environment variable `verbose` set, every status and message is printed. */
static inline int one_line_refusal(const char *what, specdec_status got, specdec_status want, const char *function,
                                   const char *needle, const char *verbose)
{
    const char *msg = specdec_last_error();
    if (getenv(verbose))
        printf("  %-26s %s\n", specdec_status_name(got), msg);
    CHECK(got == want, "%s: status %s, expected %s (message: %s)", what, specdec_status_name(got),
          specdec_status_name(want), msg);
    CHECK(msg != NULL && msg[0] != '\0', "%s: empty last error", what);
    CHECK(strchr(msg, '\n') == NULL && strchr(msg, '\r') == NULL, "%s: message is not one line: %s", what, msg);
    CHECK(strncmp(msg, function, strlen(function)) == 0, "%s: message does not start with %s: %s", what, function,
          msg);
    CHECK(needle == NULL || strstr(msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, msg);
    return 1;
}

#endif
