/* Helpers test_rcluster.c and test_rcluster_live.c share (one executable) */
#ifndef RCTEST_H
#define RCTEST_H

/* CLOCK_MONOTONIC seconds */
double now_s(void);
void sleep_ms(int ms);
/* skv_rc_slot of a C string */
unsigned slot_of(const char *key);
/* a loopback port where nothing listens (bound, then closed) */
int dead_port(void);

#endif
