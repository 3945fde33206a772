/* The question-type table's lookups (question_type.h). */
#include "base/question_type.h"

#include <string.h>

#define NAME_(ID, name, Title, criteria, shape, label, schema) [CLEF_Q_##ID] = #name,
static const char *const names[CLEF_QTYPE_COUNT] = {CLEF_QUESTION_TYPES(NAME_, CLEF_QT_NOSEP)};

#define NEEDS_optional 0
#define NEEDS_required 1
#define NEEDS_(ID, name, Title, criteria, shape, label, schema) [CLEF_Q_##ID] = NEEDS_##criteria,
static const unsigned char needs[CLEF_QTYPE_COUNT] = {CLEF_QUESTION_TYPES(NEEDS_, CLEF_QT_NOSEP)};

const char *clef_qtype_name(clef_qtype t) { return (unsigned)t < CLEF_QTYPE_COUNT ? names[t] : "?"; }

int clef_qtype_parse(const char *s, size_t n, clef_qtype *t) {
    for (int i = 0; i < CLEF_QTYPE_COUNT; i++)
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) {
            *t = (clef_qtype)i;
            return 0;
        }
    return -1;
}

int clef_qtype_needs_criteria(clef_qtype t) { return (unsigned)t < CLEF_QTYPE_COUNT && needs[t]; }

void clef_qtype_list(char *buf, size_t cap) {
    if (!cap) return;
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < CLEF_QTYPE_COUNT; i++) {
        const char *sep = i == 0 ? "" : i + 1 < CLEF_QTYPE_COUNT ? ", " : CLEF_QTYPE_COUNT > 2 ? ", or " : " or ";
        for (const char *p = sep; *p && at + 1 < cap; p++) buf[at++] = *p;
        for (const char *p = names[i]; *p && at + 1 < cap; p++) buf[at++] = *p;
    }
    buf[at] = '\0';
}
