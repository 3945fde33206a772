/* The one clock of timings, deadlines and timed waits: CLOCK_MONOTONIC (a step of the wall clock
 * never stretches or shortens them). Condition variables that wait on it are made with
 * pthread_condattr_setclock(&ca, CLOCK_MONOTONIC). */
#ifndef CLEF_BASE_CLOCK_H
#define CLEF_BASE_CLOCK_H

#include <stdint.h>

/* Seconds since an arbitrary start (the same in every thread of the process). */
double clef_now(void);

/* The same clock in nanoseconds. */
int64_t clef_now_ns(void);

#endif
