/* The three question types, shared by the request (decision/request.h: the "type" field) and the
 * joint head (model/forward.h: the row of type_embedding each type selects). */
#ifndef CLEF_BASE_QUESTION_TYPE_H
#define CLEF_BASE_QUESTION_TYPE_H

typedef enum { CLEF_Q_NOUL = 0, CLEF_Q_CHOICE = 1, CLEF_Q_SCORE = 2 } clef_qtype;

#endif
