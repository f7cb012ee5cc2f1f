#include "harness.h"
int main(int argc, char **argv) { struct h_pair p; h_init(argc, argv, &p); return h_finish(&p); }
